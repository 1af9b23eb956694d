package quota

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TakeInto gives the Result Take gives, whatever *res held before, and
// the zero Result with its error.
func TestTakeIntoIsTake(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
		for _, vary := range []bool{false, true} {
			cfg := Config{Algorithm: alg, Limits: []Limit{{Max: 3, Expiration: time.Hour}, {Max: 5, Expiration: 24 * time.Hour}}, VaryExpiration: vary}
			if vary { // a single limit, which TakeWith may vary
				cfg.Limits = cfg.Limits[:1]
			}
			if alg == SlidingLog {
				cfg.VaryExpiration = false
			}
			var clock int64
			cfg.clock = func() int64 { return clock }
			viaTake, err := New(cfg)
			require.NoError(t, err)
			viaInto, err := New(cfg)
			require.NoError(t, err)
			// stale holds a rejection of another key with two limits, as a
			// caller's reused Result might.
			var stale Result
			for range 4 {
				require.NoError(t, viaInto.TakeInto(ctx, "other", 1, &stale))
			}
			require.False(t, stale.Allowed())
			stale.n, stale.each[3].Limit, stale.granted, stale.varied = maxLimits, 42, 7, true
			for i := range 5 {
				clock += 600_000 // 10 minutes
				want, err := viaTake.Take(ctx, "k", i%3)
				require.NoError(t, err)
				got := stale
				require.NoError(t, viaInto.TakeInto(ctx, "k", i%3, &got))
				require.Equal(t, want, got, "%v, vary %v, take %d", alg, vary, i)
			}
			got := stale
			require.ErrorContains(t, viaInto.TakeInto(ctx, "k", -1, &got), "cost is -1")
			assert.Equal(t, Result{}, got)
		}
	}
}
