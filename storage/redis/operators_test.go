package redis

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A peek counts nothing and writes nothing; a block holds a key off under
// any rules (with BlockFor or MinInterval or neither) until it ends, keeps
// the counts, and Reset lifts it. Each algorithm, one limit and two.
func TestOperatorsPeekBlockReset(t *testing.T) {
	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	for _, a := range algorithms {
		for _, n := range []int{1, 2} {
			for _, keyed := range []struct {
				name            string
				block, interval time.Duration
			}{{"plain", 0, 0}, {"blockfor", time.Minute, 0}, {"interval", 0, time.Millisecond}, {"both", time.Minute, time.Millisecond}} {
				t.Run(a.name+"/"+keyed.name, func(t *testing.T) {
					c.at(0)
					rules := []Rule{{Algorithm: a.alg, Max: 5, Expiration: time.Second}, {Algorithm: a.alg, Max: 10, Expiration: time.Hour}}[:n]
					rules[0].BlockFor, rules[0].MinInterval = keyed.block, keyed.interval
					key := "op:" + a.name + keyed.name + string(rune('0'+n))
					results := make([]Result, n)
					ok, err := store.TakeAll(ctx, key, rules, 2, results)
					require.NoError(t, err)
					require.True(t, ok)
					before, err := rdb.Get(ctx, key).Result()
					require.NoError(t, err)
					c.at(2 * time.Millisecond)
					for range 10 {
						held, err := store.PeekAll(ctx, key, rules, results)
						require.NoError(t, err)
						assert.Zero(t, held)
						assert.True(t, results[0].Allowed)
						assert.EqualValues(t, 3, results[0].Remaining, "the peeks count nothing")
					}
					after, err := rdb.Get(ctx, key).Result()
					require.NoError(t, err)
					assert.Equal(t, before, after, "a peek writes nothing")

					held, err := store.BlockAll(ctx, key, rules, 90*time.Second, results)
					require.NoError(t, err)
					assert.Equal(t, 90*time.Second, held)
					assert.False(t, results[0].Allowed)
					assert.GreaterOrEqual(t, results[0].RetryAfter, 90*time.Second)
					c.at(3 * time.Second) // the window has ended: counts would admit
					ok, err = store.TakeAll(ctx, key, rules, 1, results)
					require.NoError(t, err)
					assert.False(t, ok, "held whatever the counts")
					assert.InDelta(t, float64(87*time.Second+2*time.Millisecond), float64(results[0].RetryAfter), float64(time.Millisecond))
					ttl, err := rdb.PTTL(ctx, key).Result()
					require.NoError(t, err)
					assert.Greater(t, ttl, 80*time.Second, "the key lives as long as its hold")

					held, err = store.PeekAll(ctx, key, rules, results)
					require.NoError(t, err)
					assert.InDelta(t, float64(87*time.Second+2*time.Millisecond), float64(held), float64(time.Millisecond))

					require.NoError(t, store.Reset(ctx, key))
					ok, err = store.TakeAll(ctx, key, rules, 1, results)
					require.NoError(t, err)
					assert.True(t, ok, "Reset lifts the hold")
					assert.EqualValues(t, 4, results[0].Remaining, "and forgets the counts")

					held, err = store.BlockAll(ctx, key, rules, 500*time.Millisecond, results)
					require.NoError(t, err)
					assert.Equal(t, 500*time.Millisecond, held)
					c.at(3*time.Second + 500*time.Millisecond)
					ok, err = store.TakeAll(ctx, key, rules, 1, results)
					require.NoError(t, err)
					assert.True(t, ok, "a hold ends")
					if a.alg != TokenBucket { // which refills meanwhile
						assert.EqualValues(t, 3, results[0].Remaining, "the counts kept through it")
					}
				})
			}
		}
	}
}

// beforeHolds is an algorithm's script as the release before holds had it
// (testdata/beforeholds), for a replica not yet upgraded.
func beforeHolds(t *testing.T, alg Algorithm) *goredis.Script {
	t.Helper()
	read := func(path ...string) string {
		b, err := os.ReadFile(filepath.Join(path...))
		require.NoError(t, err)
		return string(b)
	}
	body := map[Algorithm]string{FixedWindow: "fixed_window.lua", SlidingWindow: "sliding_window.lua", TokenBucket: "token_bucket.lua", SlidingLog: "sliding_log.lua"}[alg]
	sizes := map[Algorithm]string{FixedWindow: stateSizes(10, 10), SlidingWindow: stateSizes(14, 12), TokenBucket: stateSizes(13, 11), SlidingLog: stateSizes(-1, -1)}[alg]
	prelude := ""
	if alg == SlidingLog {
		prelude = read("sliding_log_prelude.lua")
	}
	return goredis.NewScript(sizes + prelude + read("testdata", "beforeholds", "head.lua") + read(body) + read("testdata", "beforeholds", "tail.lua"))
}

// A rolling deploy that brings Block: a replica of the release before
// meets a key this release holds, and keeps its counts (it admits exactly
// what is left, never a fresh quota). Without BlockFor it ignores the hold
// and keeps it for this release's replicas, which still find the key held
// after its takes; with BlockFor it holds the key for its own BlockFor
// (shortening the hold to that), and never longer. Every algorithm.
func TestHoldsMeetTheReleaseBefore(t *testing.T) {
	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	for _, a := range algorithms {
		for _, block := range []time.Duration{0, time.Minute} {
			t.Run(a.name+"/"+block.String(), func(t *testing.T) {
				c.at(0)
				rules := []Rule{{Algorithm: a.alg, Max: 10, Expiration: time.Hour, BlockFor: block}}
				key := "deploy:" + a.name + block.String()
				results := make([]Result, 1)
				ok, err := store.TakeAll(ctx, key, rules, 6, results)
				require.NoError(t, err)
				require.True(t, ok)
				_, err = store.BlockAll(ctx, key, rules, time.Hour, results)
				require.NoError(t, err)

				old := beforeHolds(t, a.alg)
				var buf [argMaxSize]byte
				take := func() bool {
					packed, err := store.pack(&buf, rules, 1, 0, nil)
					require.NoError(t, err)
					res, err := old.Run(ctx, rdb, []string{key}, string(packed)).Result()
					require.NoError(t, err)
					allowed, err := decodeResults(res.(string), rules, results)
					require.NoError(t, err)
					return allowed
				}
				if block > 0 {
					assert.False(t, take(), "held for its own BlockFor")
					assert.LessOrEqual(t, results[0].RetryAfter, block, "no longer than its BlockFor")
					c.at(block + time.Millisecond)
				}
				admitted := 0
				for range 10 {
					if take() {
						admitted++
					}
				}
				assert.Equal(t, 4, admitted, "the counts are kept: what is left, and no more")
				if block == 0 {
					held, err := store.PeekAll(ctx, key, rules, results)
					require.NoError(t, err)
					assert.InDelta(t, float64(time.Hour), float64(held), float64(time.Second), "the hold outlives the old replica's takes")
					ok, err := store.TakeAll(ctx, key, rules, 0, results)
					require.NoError(t, err)
					assert.False(t, ok, "held on this release's replicas")
				}
			})
		}
	}
}
