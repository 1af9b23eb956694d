package quota

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On Redis the deny cache answers an idempotent take with the store's
// rejection of that very request: a client that retries a rejected
// request (one Idempotency-Key) costs one script call, while one that
// sends new ids costs a call for each; a repeat of an admitted request is
// still answered by its record though the key is spent and rejected; a
// refund here drops the entries at once; and an entry lasts a second at
// most, after which a request that another replica admitted meanwhile
// (after a refund there) gets its repeat here. Every algorithm.
func TestTakeIdempotentDenyCache(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	ctx := context.Background()
	scriptCalls := func() int {
		return redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
	}
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			now := newSettableNow()
			var replicas [2]*Limiter
			for i := range replicas {
				l, err := New(Config{Algorithm: alg, Limits: []Limit{PerHour(3)}, Now: now.Now, Redis: server.Client(t),
					Name: "once-deny-" + alg.name(), FailurePolicy: FailClosed, StorageTimeout: 10 * time.Second})
				require.NoError(t, err)
				replicas[i] = l
			}
			a, b := replicas[0], replicas[1]
			takeIdempotent := func(l *Limiter, key, id string) Result {
				t.Helper()
				res, err := l.TakeIdempotent(ctx, key, id, 1)
				require.NoError(t, err)
				return res
			}
			first := takeIdempotent(a, "k", "a")
			require.Equal(t, SourceBackend, first.Source())
			second := takeIdempotent(b, "k", "b")
			require.True(t, second.Allowed())
			third := takeIdempotent(a, "k", "p")
			require.True(t, third.Allowed(), "the third: k is spent")
			plain, err := a.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.False(t, plain.Allowed(), "a plain take's rejection, kept in the deny cache")

			for _, tc := range []struct {
				name    string
				ids     func(i int) string
				calls   int  // script calls for 100 takes
				repeats bool // the first 8 are repeats
			}{
				{"new ids", func(i int) string { return "new-" + strconv.Itoa(i) }, 100, false},
				{"an admitted id: 8 repeats, then a new request", func(int) string { return "a" }, 9, true},
				{"one rejected id, retried", func(int) string { return "c" }, 1, false},
			} {
				require.NoError(t, admin.ConfigResetStat(ctx).Err())
				for i := range 100 {
					res := takeIdempotent(a, "k", tc.ids(i))
					switch {
					case tc.repeats && i < 8:
						assert.Equal(t, SourceRepeat, res.Source(), "%s: %d", tc.name, i)
						assert.Equal(t, first.Decisions(), res.Decisions(), "%s: the first Result again", tc.name)
					default:
						assert.False(t, res.Allowed(), "%s: %d", tc.name, i)
					}
				}
				assert.Equal(t, tc.calls, scriptCalls(), "%s: script calls for 100 takes", tc.name)
			}

			// A refund on another replica makes room that this one does not
			// see: a request admitted there meanwhile is rejected here, by
			// the deny cache, for a second at most.
			_, err = b.RefundIdempotent(ctx, "k", "b", 1, &second)
			require.NoError(t, err)
			there := takeIdempotent(b, "k", "c")
			require.Equal(t, SourceBackend, there.Source())
			require.True(t, there.Allowed())
			stale := takeIdempotent(a, "k", "c")
			assert.Equal(t, SourceDenyCache, stale.Source())
			now.Add(time.Second)
			here := takeIdempotent(a, "k", "c")
			assert.Equal(t, SourceRepeat, here.Source(), "a second on, the record answers")
			assert.Equal(t, there.Decisions(), here.Decisions())

			// A refund here drops the key's entries at once.
			rejected := takeIdempotent(a, "k", "d")
			require.False(t, rejected.Allowed())
			cached := takeIdempotent(a, "k", "d")
			require.Equal(t, SourceDenyCache, cached.Source())
			_, err = a.RefundIdempotent(ctx, "k", "p", 1, &third)
			require.NoError(t, err)
			after := takeIdempotent(a, "k", "d")
			assert.Equal(t, SourceBackend, after.Source())
			assert.True(t, after.Allowed(), "the refund's room")
		})
	}
}
