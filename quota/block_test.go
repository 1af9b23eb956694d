package quota

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With BlockFor, the take a key is rejected for blocks it: its takes are
// rejected for BlockFor whatever its counts, with Remaining 0 and
// RetryAfter the block's rest, on every backend and algorithm; a cost above
// the quota does not block; after the block, the key's counts decide again.
func TestBlockFor(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{
					Algorithm: alg, Limits: []Limit{{Max: 3, Expiration: time.Second}}, BlockFor: time.Minute,
					Now: now.Now, Name: "block-" + alg.name(),
				}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				take := func(cost int) Result {
					t.Helper()
					res, err := l.Take(ctx, "k", cost)
					require.NoError(t, err)
					return res
				}
				res := take(9)
				assert.Equal(t, Never, res.RetryAfter(), "a cost above the quota is never admitted")
				res = take(3)
				assert.True(t, res.Allowed(), "and did not block")
				res = take(1)
				require.False(t, res.Allowed())
				assert.Equal(t, time.Minute, res.RetryAfter(), "the rejection blocks for BlockFor")
				assert.Equal(t, 0, res.Tightest().Remaining)

				now.Add(30 * time.Second) // the window has long refilled
				res = take(1)
				assert.False(t, res.Allowed(), "blocked whatever the counts")
				assert.Equal(t, 30*time.Second, res.RetryAfter())
				assert.Equal(t, 0, res.Tightest().Remaining)
				res = take(0)
				assert.False(t, res.Allowed(), "a take of 0 too")
				granted, _, err := l.TakeUpTo(ctx, "k", 2)
				require.NoError(t, err)
				assert.Zero(t, granted)
				res = take1(t, l, "other")
				assert.True(t, res.Allowed(), "another key is not blocked")

				now.Add(30 * time.Second)
				res = take(1)
				assert.True(t, res.Allowed(), "the block has ended")
			})
		}
	}
}

func take1(t *testing.T, l *Limiter, key string) Result {
	t.Helper()
	res, err := l.Take(context.Background(), key, 1)
	require.NoError(t, err)
	return res
}

// BlockFor is checked at New.
func TestBlockForIsChecked(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, maxBlock + time.Hour} {
		_, err := New(Config{Limits: []Limit{PerMinute(5)}, BlockFor: d})
		assert.ErrorContains(t, err, "BlockFor is")
	}
}

// On Redis a block holds on every replica: one replica's rejection blocks
// the key for another, each with its own client and deny cache.
func TestBlockForAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	replica := func() *Limiter {
		l, err := New(Config{Limits: []Limit{PerMinute(2)}, BlockFor: time.Hour, Redis: server.Client(t), Name: "shared", StorageTimeout: slowMachine})
		require.NoError(t, err)
		return l
	}
	a, b := replica(), replica()
	for range 2 {
		res := take1(t, a, "k")
		require.True(t, res.Allowed())
	}
	res := take1(t, a, "k")
	require.False(t, res.Allowed())
	res = take1(t, b, "k")
	assert.False(t, res.Allowed())
	assert.Greater(t, res.RetryAfter(), 59*time.Minute, "the other replica sees the block")
	assert.Equal(t, SourceBackend, res.Source())
}

// On Redis MinInterval holds across replicas, for every algorithm: of
// takes sent at once from three replicas, each with its own client and
// deny cache, one is admitted within the gap, whatever the limits allow.
func TestMinIntervalAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			var replicas []*Limiter
			for range 3 {
				l, err := New(Config{Algorithm: alg, Limits: []Limit{PerMinute(100)}, MinInterval: time.Hour,
					Redis: server.Client(t), Name: "gap-replicas", FailurePolicy: FailClosed, StorageTimeout: 10 * time.Second})
				require.NoError(t, err)
				replicas = append(replicas, l)
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for i := range 60 {
				wg.Go(func() {
					res, err := replicas[i%3].Take(context.Background(), "k", 1)
					assert.NoError(t, err)
					// Redis decides, or a replica's deny cache repeats its
					// rejection: never a failure policy.
					assert.Contains(t, []Source{SourceBackend, SourceDenyCache}, res.Source())
					if res.Allowed() {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(1), admitted.Load())
		})
	}
}

// With MinInterval, no two admitted takes of a cost are closer than it, on
// every backend and algorithm: one that comes sooner is rejected with
// Remaining 0 and RetryAfter the rest of the wait, and counts nothing; a
// take of 0 is not held; with BlockFor, a take rejected for the gap blocks.
func TestMinInterval(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{
					Algorithm: alg, Limits: []Limit{PerMinute(100)}, MinInterval: 200 * time.Millisecond,
					Now: now.Now, Name: "gap-" + alg.name(),
				}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				at := func(ms int, cost int) Result {
					t.Helper()
					now.Set(time.Unix(1_700_000_000, 0).Add(time.Duration(ms) * time.Millisecond))
					res, err := l.Take(context.Background(), "k", cost)
					require.NoError(t, err)
					return res
				}
				res := at(0, 1)
				assert.True(t, res.Allowed())
				res = at(120, 1)
				assert.False(t, res.Allowed(), "sooner than MinInterval")
				assert.Equal(t, 80*time.Millisecond, res.RetryAfter())
				assert.Equal(t, 0, res.Tightest().Remaining)
				res = at(150, 0)
				assert.True(t, res.Allowed(), "a take of 0 is not held")
				res = at(200, 2)
				assert.True(t, res.Allowed())
				assert.Equal(t, 97, res.Tightest().Remaining, "the rejected take counted nothing")
				granted, _, err := l.TakeUpTo(context.Background(), "k", 3)
				require.NoError(t, err)
				assert.Zero(t, granted, "at 200 ms, again too soon")
				res = at(400, 1)
				assert.True(t, res.Allowed())

				cfg.BlockFor, cfg.Name = time.Minute, "gap-block-"+alg.name()
				l, err = New(cfg)
				require.NoError(t, err)
				res = at(1000, 1)
				require.True(t, res.Allowed())
				res = at(1100, 1)
				assert.Equal(t, time.Minute, res.RetryAfter(), "rejected for the gap, and so blocked")
				res = at(1500, 1)
				assert.False(t, res.Allowed())
			})
		}
	}
}

// On random traces of takes, no two admitted takes of a cost are closer
// than MinInterval, in memory and on Redis, which decide alike.
func TestMinIntervalHoldsOnRandomTraces(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			const gap = 70
			ls := limits{n: 1, gap: gap}
			ls.r[0] = rule{max: 5, burst: 5, window: 400}
			clock := newTraceClock(1_700_000_000_000)
			mem := testManager(alg, ls, 1<<10, clock.millis)
			red := newRedisBackend(server.Client(t), nil, alg, "gap-trace:"+alg.name()+":", &Config{clock: clock.millis})
			rng := rand.New(rand.NewPCG(5, uint64(alg)))
			last := int64(-1 << 40)
			admitted := 0
			for step := range 2000 {
				clock.step(rng.Int64N(50))
				cost := int64(rng.IntN(3))
				want, err := mem.take(context.Background(), "k", &ls, cost)
				require.NoError(t, err)
				got, err := red.take(context.Background(), "k", &ls, cost)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d", step)
				if want.Allowed() && cost > 0 {
					require.GreaterOrEqual(t, clock.millis()-last, int64(gap), "step %d: two admitted takes too close", step)
					last = clock.millis()
					admitted++
				}
			}
			assert.Greater(t, admitted, 100)
		})
	}
}
