package quota

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An idempotent take whose cost is given back (RefundIdempotent, as
// Skip*Requests does) answers no repeats: its retries are decided, and
// counted, afresh, so a refund followed by repeats cannot pass requests
// for free. A retry of a larger cost than the first take's is no repeat
// either. On every backend and algorithm.
func TestTakeIdempotentRefundedAndLargerRetries(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{Algorithm: alg, Limits: []Limit{PerMinute(2)}, Now: now.Now, Name: "once-refund-" + alg.name()}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				takeIdempotent := func(key, id string, cost int) Result {
					t.Helper()
					res, err := l.TakeIdempotent(ctx, key, id, cost)
					require.NoError(t, err)
					return res
				}

				// Counted, then given back: its retry is a new request.
				first := takeIdempotent("k", "req-1", 1)
				require.Equal(t, SourceBackend, first.Source())
				_, err = l.RefundIdempotent(ctx, "k", "req-1", 1, &first)
				require.NoError(t, err)
				retry := takeIdempotent("k", "req-1", 1)
				assert.Equal(t, SourceBackend, retry.Source(), "decided afresh")
				require.True(t, retry.Allowed())
				assert.Equal(t, 1, retry.Tightest().Remaining, "and counted")
				again := takeIdempotent("k", "req-1", 1)
				assert.Equal(t, SourceRepeat, again.Source(), "its own retries repeat it")

				// A repeat's refund gives nothing back and keeps the record.
				repeat := takeIdempotent("k", "req-1", 1)
				after, err := l.RefundIdempotent(ctx, "k", "req-1", 1, &repeat)
				require.NoError(t, err)
				assert.Equal(t, SourceRepeat, after.Source())
				again = takeIdempotent("k", "req-1", 1)
				assert.Equal(t, SourceRepeat, again.Source())

				// Over and over: each refunded id costs its retry.
				for _, id := range []string{"req-2", "req-3", "req-4"} {
					res := takeIdempotent("k", id, 1)
					if res.Allowed() {
						_, err = l.RefundIdempotent(ctx, "k", id, 1, &res)
						require.NoError(t, err)
					}
					for range 3 {
						takeIdempotent("k", id, 1)
					}
				}
				plain, err := l.Take(ctx, "k", 0)
				require.NoError(t, err)
				assert.Zero(t, plain.Tightest().Remaining, "req-1's retry and one retried id spent the two")

				// A larger cost is no repeat: a cost above the quota is
				// never admitted, whatever id it comes with.
				small := takeIdempotent("big", "req-5", 1)
				require.True(t, small.Allowed())
				big := takeIdempotent("big", "req-5", 3)
				assert.NotEqual(t, SourceRepeat, big.Source())
				assert.False(t, big.Allowed(), "a cost of 3 under a limit of 2")
				again = takeIdempotent("big", "req-5", 1)
				assert.Equal(t, SourceRepeat, again.Source(), "the first take's record stands")
			})
		}
	}
}

// Retries that come while the first request is still being handled are
// repeats served on its take: when that request then ends as one to give
// back, its cost stays counted, so fresh ids cannot pass requests for
// free. A refund under a context that has ended (the client left) still
// drops the record. On every backend.
func TestTakeIdempotentRepeatsBeforeTheRefund(t *testing.T) {
	for _, b := range everyBackend(t) {
		t.Run(b.name, func(t *testing.T) {
			cfg := Config{Limits: []Limit{PerMinute(1)}, Now: newSettableNow().Now, Name: "once-before-" + b.name}
			b.set(&cfg)
			l, err := New(cfg)
			require.NoError(t, err)
			ctx := context.Background()
			served := 0
			for _, id := range []string{"a", "b", "c"} {
				first, err := l.TakeIdempotent(ctx, "k", id, 1)
				require.NoError(t, err)
				if !first.Allowed() {
					continue
				}
				served++
				for range 8 {
					if r, err := l.TakeIdempotent(ctx, "k", id, 1); err == nil && r.Allowed() {
						served++
					}
				}
				after, err := l.RefundIdempotent(ctx, "k", id, 1, &first)
				require.NoError(t, err)
				assert.Zero(t, after.Tightest().Remaining, "%s: not given back", id)
			}
			assert.Equal(t, 9, served, "the first take and its 8 repeats")

			cancelled := Config{Limits: []Limit{PerMinute(2)}, Now: newSettableNow().Now, Name: "once-cancelled-" + b.name}
			b.set(&cancelled)
			l, err = New(cancelled)
			require.NoError(t, err)
			first, err := l.TakeIdempotent(ctx, "k", "req", 1)
			require.NoError(t, err)
			gone, cancel := context.WithCancel(ctx)
			cancel()
			_, err = l.RefundIdempotent(gone, "k", "req", 1, &first)
			require.NoError(t, err)
			for range 3 {
				_, err := l.TakeIdempotent(ctx, "k", "req", 1)
				require.NoError(t, err)
			}
			plain, err := l.Take(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, 1, plain.Tightest().Remaining, "given back, then its retry counted once")
		})
	}
}
