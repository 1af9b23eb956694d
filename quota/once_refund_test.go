package quota

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A take once per request whose cost is given back (RefundOnce, as
// Skip*Requests does) answers no repeats: its retries are decided, and
// counted, afresh, so a refund followed by repeats cannot pass requests
// for free. A retry of a larger cost than the first take's is no repeat
// either. On every backend and algorithm.
func TestTakeOnceRefundedAndLargerRetries(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{Algorithm: alg, Limits: []Limit{PerMinute(2)}, Now: now.Now, Name: "once-refund-" + alg.name()}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				once := func(key, id string, cost int) Result {
					t.Helper()
					res, err := l.TakeOnce(ctx, key, id, cost)
					require.NoError(t, err)
					return res
				}

				// Counted, then given back: its retry is a new request.
				first := once("k", "req-1", 1)
				require.Equal(t, SourceBackend, first.Source())
				_, err = l.RefundOnce(ctx, "k", "req-1", 1, &first)
				require.NoError(t, err)
				retry := once("k", "req-1", 1)
				assert.Equal(t, SourceBackend, retry.Source(), "decided afresh")
				require.True(t, retry.Allowed())
				assert.Equal(t, 1, retry.Tightest().Remaining, "and counted")
				again := once("k", "req-1", 1)
				assert.Equal(t, SourceRepeat, again.Source(), "its own retries repeat it")

				// A repeat's refund gives nothing back and keeps the record.
				repeat := once("k", "req-1", 1)
				after, err := l.RefundOnce(ctx, "k", "req-1", 1, &repeat)
				require.NoError(t, err)
				assert.Equal(t, SourceRepeat, after.Source())
				again = once("k", "req-1", 1)
				assert.Equal(t, SourceRepeat, again.Source())

				// Over and over: each refunded id costs its retry.
				for _, id := range []string{"req-2", "req-3", "req-4"} {
					res := once("k", id, 1)
					if res.Allowed() {
						_, err = l.RefundOnce(ctx, "k", id, 1, &res)
						require.NoError(t, err)
					}
					for range 3 {
						once("k", id, 1)
					}
				}
				plain, err := l.Take(ctx, "k", 0)
				require.NoError(t, err)
				assert.Zero(t, plain.Tightest().Remaining, "req-1's retry and one retried id spent the two")

				// A larger cost is no repeat: a cost above the quota is
				// never admitted, whatever id it comes with.
				small := once("big", "req-5", 1)
				require.True(t, small.Allowed())
				big := once("big", "req-5", 3)
				assert.NotEqual(t, SourceRepeat, big.Source())
				assert.False(t, big.Allowed(), "a cost of 3 under a limit of 2")
				again = once("big", "req-5", 1)
				assert.Equal(t, SourceRepeat, again.Source(), "the first take's record stands")
			})
		}
	}
}
