package quota

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TakeInto gives the Result Take gives, whatever *res held before, and
// the zero Result with its error: in memory, with VaryExpiration (through
// TakeWith), and on a Storage.
func TestTakeIntoIsTake(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
		for _, backend := range []string{"memory", "vary", "storage"} {
			if backend == "vary" && alg == SlidingLog {
				continue // the log's Expiration does not vary
			}
			var clock int64
			cfg := Config{Algorithm: alg, Limits: []Limit{{Max: 3, Expiration: time.Hour}, {Max: 5, Expiration: 24 * time.Hour}}}
			cfg.clock = func() int64 { return clock }
			if backend == "vary" { // a single limit, which TakeWith may vary
				cfg.Limits, cfg.VaryExpiration = cfg.Limits[:1], true
			}
			viaTakeCfg, viaIntoCfg := cfg, cfg
			if backend == "storage" {
				viaTakeCfg.Storage = &mapStorage{m: map[string][]byte{}}
				viaIntoCfg.Storage = &mapStorage{m: map[string][]byte{}}
			}
			viaTake, err := New(viaTakeCfg)
			require.NoError(t, err)
			viaInto, err := New(viaIntoCfg)
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
				require.Equal(t, want, got, "%v, %s, take %d", alg, backend, i)
			}
			got := stale
			require.ErrorContains(t, viaInto.TakeInto(ctx, "k", -1, &got), "cost is -1")
			assert.Equal(t, Result{}, got)
		}
	}
}
