package redis

import (
	"context"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key of another type under a limiter's key name fails that key's calls
// until it expires; a call gives it the longest window as its TTL when it
// has none or a longer one, so that it holds the key off for a window at
// most, and leaves a shorter TTL as it is. Alone and in a batch.
func TestForeignTypeTTLCapped(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	ctx := context.Background()
	ttls := []struct {
		name    string
		ttl     time.Duration // 0: none
		atMost  time.Duration
		atLeast time.Duration
	}{
		{"none", 0, time.Minute, 50 * time.Second},
		{"a year", 365 * 24 * time.Hour, time.Minute, 50 * time.Second},
		{"shorter than the window", 5 * time.Second, 5 * time.Second, time.Second},
	}
	foreign := func(t *testing.T, key string, ttl time.Duration) {
		require.NoError(t, admin.Del(ctx, key).Err())
		require.NoError(t, admin.HSet(ctx, key, "f", "v").Err())
		if ttl > 0 {
			require.NoError(t, admin.Expire(ctx, key, ttl).Err())
		}
	}
	store := New(server.Client(t), WithoutPipelining()).engine
	algorithms := map[string]Algorithm{"fixed": FixedWindow, "sliding": SlidingWindow, "token": TokenBucket, "log": SlidingLog}
	for name, alg := range algorithms {
		for _, tt := range ttls {
			t.Run(name+"/alone/"+tt.name, func(t *testing.T) {
				key := "foreign:" + name
				foreign(t, key, tt.ttl)
				_, err := store.Take(ctx, key, Rule{Algorithm: alg, Max: 10, Expiration: time.Minute}, 1)
				assert.ErrorContains(t, err, "WRONGTYPE")
				ttl, err := admin.PTTL(ctx, key).Result()
				require.NoError(t, err)
				assert.LessOrEqual(t, ttl, tt.atMost)
				assert.GreaterOrEqual(t, ttl, tt.atLeast)
			})
		}
	}
	// testTakeArg is a fixed window of an hour.
	b := newBatcher(server.Client(t), &pipelineStats{}, false)
	for _, tt := range ttls {
		t.Run("batch/"+tt.name, func(t *testing.T) {
			if tt.atMost == time.Minute {
				tt.atMost, tt.atLeast = time.Hour, 50*time.Minute
			}
			foreign(t, "foreign:batch", tt.ttl)
			calls := []*batchedCall{
				{ctx: ctx, alg: FixedWindow, key: "foreign:ok", arg: testTakeArg()},
				{ctx: ctx, alg: FixedWindow, key: "foreign:batch", arg: testTakeArg()},
			}
			b.exec(ctx, calls)
			require.NoError(t, calls[0].cmd.Err())
			assert.ErrorContains(t, calls[1].cmd.Err(), "WRONGTYPE")
			ttl, err := admin.PTTL(ctx, "foreign:batch").Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, tt.atMost)
			assert.GreaterOrEqual(t, ttl, tt.atLeast)
		})
	}
}
