package headers

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// emptyFields is a response with no fields yet.
type emptyFields struct{}

func (emptyFields) Peek([]byte) []byte { return nil }

// Where Plain says it applies, the three values it gives are what
// WriteAdmitted writes, and WriteAdmitted writes nothing else; where it
// says it does not, WriteAdmitted writes something else (another mode,
// several limits, a spent limit's Retry-After, a rejection).
func TestPlainIsWriteAdmitted(t *testing.T) {
	single := []quota.Limit{{Max: 3, Expiration: time.Minute}}
	double := []quota.Limit{{Max: 3, Expiration: time.Minute}, {Max: 10, Expiration: time.Hour}}
	tests := []struct {
		name   string
		mode   Mode
		limits []quota.Limit
		plain  []bool // per take, of 4
	}{
		{"x-ratelimit", XRateLimit, single, []bool{true, true, false, false}},
		{"ietf", IETF, single, []bool{false, false, false, false}},
		{"both", Both, single, []bool{false, false, false, false}},
		{"several limits", XRateLimit, double, []bool{false, false, false, false}},
	}
	for _, tt := range tests {
		for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindow, quota.TokenBucket} {
			t.Run(tt.name+"/"+alg.String(), func(t *testing.T) {
				var hl []Limit
				if len(tt.limits) > 1 {
					for _, l := range tt.limits {
						hl = append(hl, Limit{Expiration: l.Expiration})
					}
				}
				w, err := New(Config{Mode: tt.mode, Limits: hl})
				require.NoError(t, err)
				l, err := quota.New(quota.Config{Algorithm: alg, Limits: tt.limits})
				require.NoError(t, err)
				for i, want := range tt.plain {
					res, err := l.Take(context.Background(), "k", 1)
					require.NoError(t, err)
					limit, remaining, reset, ok := w.Plain(&res)
					assert.Equal(t, want, ok, "take %d", i+1)
					var out Out
					w.WriteAdmitted(&out, emptyFields{}, &res, "k", false, false)
					if !ok {
						continue
					}
					require.Equal(t, 3, out.Len(), "take %d", i+1)
					for j, v := range []int64{limit, remaining, reset} {
						_, value := out.Field(j)
						assert.Equal(t, strconv.FormatInt(v, 10), string(value), "take %d, field %d", i+1, j)
					}
				}
			})
		}
	}
}

// pk carries a key of up to 64 bytes as it is, and a longer one as its
// SHA-256 digest: a client's long key does not lengthen the fields.
func TestPartitionKeyIsBounded(t *testing.T) {
	short := strings.Repeat("k", 64)
	long := strings.Repeat("k", 10_000)
	digest := sha256.Sum256([]byte(long))
	assert.Equal(t, ";pk=:"+base64.StdEncoding.EncodeToString([]byte(short))+":", string(appendPartitionKey(nil, short)))
	assert.Equal(t, ";pk=:"+base64.StdEncoding.EncodeToString(digest[:])+":", string(appendPartitionKey(nil, long)))
	assert.NotEqual(t, appendPartitionKey(nil, long), appendPartitionKey(nil, long+"x"))
}
