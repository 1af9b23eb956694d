package fasthttpfields

import (
	"testing"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// values are the values of every field of h named name, byte for byte.
func values(h *fasthttp.ResponseHeader, name string) []string {
	var out []string
	h.VisitAll(func(k, v []byte) {
		if string(k) == name {
			out = append(out, string(v))
		}
	})
	return out
}

// Fold, on a header that keeps names as given: a single field ends with
// one value, the last set under any spelling; a list keeps every value,
// its own first; the fields of the mode the limiter does not write, and
// fields of other names, are left as they are.
func TestFold(t *testing.T) {
	w, err := headers.New(headers.Config{Mode: headers.IETF})
	require.NoError(t, err)
	var h fasthttp.ResponseHeader
	h.DisableNormalizing()
	h.Add("X-RateLimit-Remaining", "99")
	h.Add("x-ratelimit-remaining", "98")
	h.Add("Retry-After", "1")
	h.Add("retry-after", "7")
	h.Add("Ratelimit", `"own";r=1;t=1`)
	h.Add("RateLimit", `"a";r=1;t=1`)
	h.Add("RATELIMIT", `"b";r=1;t=1`)
	h.Add("X-Request-Id", "abc")
	Fold(&h, w)

	assert.Equal(t, []string{"7"}, values(&h, "Retry-After"))
	assert.Empty(t, values(&h, "retry-after"))
	assert.Equal(t, []string{`"own";r=1;t=1`, `"a";r=1;t=1`, `"b";r=1;t=1`}, values(&h, "Ratelimit"))
	assert.Empty(t, values(&h, "RateLimit"))
	assert.Equal(t, []string{"99"}, values(&h, "X-RateLimit-Remaining"), "not this limiter's mode")
	assert.Equal(t, []string{"98"}, values(&h, "x-ratelimit-remaining"))
	assert.Equal(t, []string{"abc"}, values(&h, "X-Request-Id"))

	x, err := headers.New(headers.Config{Mode: headers.XRateLimit})
	require.NoError(t, err)
	Fold(&h, x)
	assert.Equal(t, []string{"98"}, values(&h, "X-Ratelimit-Remaining"), "the last value set")
	assert.Empty(t, values(&h, "X-RateLimit-Remaining"))
	assert.Empty(t, values(&h, "x-ratelimit-remaining"))

	none, err := headers.New(headers.Config{Mode: headers.None})
	require.NoError(t, err)
	var r fasthttp.ResponseHeader
	r.DisableNormalizing()
	r.Add("retry-after", "1")
	r.Add("x-ratelimit-limit", "A")
	Fold(&r, none)
	assert.Equal(t, []string{"1"}, values(&r, "Retry-After"), "read by every mode")
	assert.Equal(t, []string{"A"}, values(&r, "x-ratelimit-limit"))
}
