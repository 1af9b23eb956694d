package limiter

// The deny cache: a rejected request is answered locally until its RetryAfter, sparing the Storage.

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The deny cache: once the storage rejects a key, the same request (same
// cost, same limit) is rejected locally until its RetryAfter, with the
// storage's headers, and without a call; another cost, another limit or the
// end of RetryAfter go to the storage again. Disabled, every request calls.
func TestDenyCache(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(map[bool]string{false: "on", true: "off"}[disabled], func(t *testing.T) {
			store := newFlakyStorage(t)
			clock := &testClock{}
			cost := atomic.Int64{}
			cost.Store(1)
			limit := atomic.Int64{}
			limit.Store(3)
			app := newApp(Config{
				Storage: store, Expiration: 10 * time.Second, DisableDenyCache: disabled,
				MaxFunc: func(*fiber.Ctx) int { return int(limit.Load()) },
				Cost:    func(*fiber.Ctx) int { return int(cost.Load()) },
			}, clock, nil)
			cost.Store(2)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			stored := headersOf(resp)
			calls := store.gets.Load()

			for range 100 {
				resp := get(t, app, "/", "")
				require.Equal(t, 429, resp.StatusCode)
				require.Equal(t, stored, headersOf(resp))
			}
			if disabled {
				assert.Equal(t, calls+100, store.gets.Load())
				return
			}
			assert.Equal(t, calls, store.gets.Load(), "a rejected key costs the storage nothing")
			cost.Store(3)
			resp = get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			assert.Equal(t, calls+1, store.gets.Load(), "another cost goes to the storage, for its own RetryAfter")
			cost.Store(4)
			resp = get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			assert.Empty(t, resp.Header.Get("Retry-After"), "a cost above the limit: never, as the storage says")
			calls = store.gets.Load()

			cost.Store(1)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode, "a smaller cost fits: the storage admits it")
			assert.Equal(t, calls+1, store.gets.Load())

			cost.Store(2)
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			calls = store.gets.Load()
			limit.Store(10)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode, "another limit goes to the storage")
			assert.Equal(t, calls+1, store.gets.Load())

			limit.Store(3)
			clock.advance(9999 * time.Millisecond)
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			calls = store.gets.Load()
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			assert.Equal(t, calls, store.gets.Load())
			clock.advance(time.Millisecond)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode, "RetryAfter has passed")
			assert.Equal(t, calls+1, store.gets.Load())
		})
	}
}

// The deny cache keeps a flood on an exhausted key off Redis: after Max 5
// per minute is used up, 10,000 requests from 32 goroutines are all
// rejected, while Redis decides at most one per replica for each request
// already in flight when the first rejection came back (at most
// replicas×32), where without the cache it decides all 10,000. Who decided
// is what OnDecision reports.
func TestDenyCacheSparesRedis(t *testing.T) {
	const max, flood, callers, slack = 5, 10_000, 32, 4
	for _, kind := range faultBothWays {
		for _, replicaN := range []int{1, faultReplicaN} {
			for _, disabled := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/replicas=%d/DisableDenyCache=%v", kind, replicaN, disabled), func(t *testing.T) {
					srv := redistest.Start(t)
					var fromRedis, fromCache atomic.Int64
					counting := atomic.Bool{}
					replicas := faultReplicas(t, srv, kind, replicaN, func(int) Config {
						return Config{Max: max, Expiration: time.Minute, StorageTimeout: faultCallsTimeout, DisableDenyCache: disabled,
							OnDecision: func(_ *fiber.Ctx, e DecisionEvent) {
								if !counting.Load() {
									return
								}
								switch e.Source {
								case SourceBackend:
									fromRedis.Add(1)
								case SourceDenyCache:
									fromCache.Add(1)
								}
							}}
					})
					require.Equal(t, max, hammer(t, replicas, "hot", max, 1))
					counting.Store(true)
					require.Zero(t, hammer(t, replicas, "hot", flood, callers), "a request on the exhausted key was admitted")
					t.Logf("%d replica(s), deny cache disabled %v: Redis decided %d of %d requests, the cache %d", replicaN, disabled, fromRedis.Load(), flood, fromCache.Load())
					require.Equal(t, int64(flood), fromRedis.Load()+fromCache.Load(), "requests answered by neither")
					if disabled {
						require.Equal(t, int64(flood), fromRedis.Load())
					} else {
						require.LessOrEqual(t, fromRedis.Load(), int64(replicaN*callers+slack))
					}
				})
			}
		}
	}
}
