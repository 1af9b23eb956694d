package limiter

// Redis as the Storage: exact across replicas, on a cluster, scripts flushed, TTLs, refunds, clocks.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	fiberredis "github.com/gofiber/storage/redis/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Three replicas, each with its own client and limiter, share one Redis:
// exactly Max requests are admitted, every round, for every algorithm, both
// with this module's store and with gofiber/storage/redis/v3 as Storage.
func TestRedisExactAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	storages := map[string]func() fiber.Storage{
		"store": func() fiber.Storage {
			return redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 32}))
		},
		"store-unpipelined": func() fiber.Storage {
			return redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 32}), redis.WithoutPipelining())
		},
		"gofiber-storage": func() fiber.Storage {
			return fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: server.Port, PoolSize: 32})
		},
	}
	const rounds, requests, callers, max = 5, 5000, 96, 1000
	for name, newStorage := range storages {
		for _, alg := range algorithms {
			t.Run(name+"/"+alg.name, func(t *testing.T) {
				var replicas []fasthttp.RequestHandler
				for range 3 {
					storage := newStorage()
					t.Cleanup(func() { _ = storage.Close() })
					replicas = append(replicas, replicaHandler(strict(Config{
						Max: max, Expiration: 1000 * time.Hour, Storage: storage, LimiterMiddleware: alg.mw,
					})))
				}
				for round := range rounds {
					key := "exact-" + name + "-" + strconv.Itoa(round)
					require.Equal(t, max, hammer(t, replicas, key, requests, callers), "round %d", round)
				}
			})
		}
	}
}

// On a Redis Cluster of 3 masters, keys spread over all of them, each key
// is limited exactly, and no cluster error reaches a client, with replicas
// that pipeline (one batcher per master) and one that does not.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for i := range 3 {
				var opts []redis.Option
				if i == 1 {
					opts = append(opts, redis.WithoutPipelining())
				}
				replicas = append(replicas, replicaHandler(strict(Config{
					Max: 2, Expiration: time.Hour, Storage: redis.New(cluster.Client(t), opts...), LimiterMiddleware: alg.mw,
					KeyPrefix: "cluster-" + alg.name + ":",
				})))
			}
			// Keys decided concurrently, so that pipelines carry keys of
			// every master.
			var wg sync.WaitGroup
			for g := range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; i < 1000; i += 20 {
						assert.Equal(t, 2, hammer(t, replicas, "k"+strconv.Itoa(i), 3, 1), "key %d", i)
					}
				}()
			}
			wg.Wait()
			for i := range 5 {
				require.Equal(t, 2, hammer(t, replicas, "hot"+strconv.Itoa(i), 200, 32))
			}
		})
	}
	for _, m := range cluster.Masters {
		n, err := m.Client(t).DBSize(context.Background()).Result()
		require.NoError(t, err)
		assert.Greater(t, n, int64(500), "master %s holds too few of the 3015 keys", m.Addr())
	}
}

// Decisions go on after the server forgets its scripts and after it restarts.
func TestRedisScriptFlushAndRestart(t *testing.T) {
	for name, opts := range map[string][]redis.Option{"pipelined": nil, "unpipelined": {redis.WithoutPipelining()}} {
		t.Run(name, func(t *testing.T) {
			server := redistest.Start(t)
			client := server.Client(t)
			app := newApp(strict(Config{Max: 100, Storage: redis.New(client, opts...), LimiterMiddleware: SlidingWindow{}}), nil, nil)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			require.NoError(t, client.ScriptFlush(context.Background()).Err())
			resp := get(t, app, "/", "")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "98", resp.Header.Get("X-RateLimit-Remaining"))
			server.Restart()
			resp = get(t, app, "/", "")
			require.Equal(t, 200, resp.StatusCode)
			require.Equal(t, "99", resp.Header.Get("X-RateLimit-Remaining"), "a restarted server without data starts afresh")
		})
	}
}

// Every key the limiter writes has a TTL no longer than its state needs.
func TestRedisKeysHaveTTL(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	limits := []struct {
		mw     LimiterHandler
		maxTTL time.Duration
	}{
		{FixedWindow{}, 10 * time.Second},
		{SlidingWindow{}, 20 * time.Second}, // two windows
		{TokenBucket{}, 10 * time.Second},   // a full refill
	}
	for _, l := range limits {
		// Two limiters named alike share their state on purpose.
		app := newApp(Config{Max: 5, Expiration: 10 * time.Second, Storage: redis.New(client), LimiterMiddleware: l.mw,
			KeyGenerator: headerKey, SkipSuccessfulRequests: true, Name: "ttl"}, nil, nil)
		for i := range 50 {
			get(t, app, "/", "k"+strconv.Itoa(i%7))
		}
		app = newApp(Config{Max: 5, Expiration: 10 * time.Second, Storage: redis.New(client), LimiterMiddleware: l.mw,
			KeyGenerator: headerKey, Name: "ttl"}, nil, nil)
		for i := range 50 {
			get(t, app, "/", "k"+strconv.Itoa(i%7))
		}
		keys, err := client.Keys(context.Background(), "limiter:ttl:"+map[string]string{"FixedWindow": "fw", "SlidingWindow": "sw", "TokenBucket": "tb", "SlidingLog": "sl"}[fiberName(l.mw)]+":*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 7)
		for _, k := range keys {
			ttl, err := client.PTTL(context.Background(), k).Result()
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), "key %s has no TTL", k)
			require.LessOrEqual(t, ttl, l.maxTTL, "key %s", k)
		}
	}
	// KEYS, not DBSIZE: the probe New makes writes a key that lives a ms,
	// which DBSIZE counts until Redis gets round to dropping it.
	require.Len(t, storedKeys(t, client, "*"), 21, "nothing but the limited keys is stored")
}

// SkipFailedRequests through Redis gives the cost back in the window it
// was counted in, also when the request ends after that window has passed,
// exactly as the in-memory manager does.
func TestRedisRefunds(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			backends := map[string]fiber.Storage{"memory": nil, "redis": redis.New(server.Client(t))}
			statuses := map[string][]int{}
			for name, storage := range backends {
				clock := &testClock{}
				clock.advance(time.Hour)
				app := newApp(strict(Config{
					Max: 2, Expiration: time.Second, Storage: storage, LimiterMiddleware: alg.mw,
					SkipFailedRequests: true, KeyPrefix: "refund-" + alg.name + ":",
				}), clock, func(c *fiber.Ctx) error {
					switch c.Path() {
					case "/bad":
						return fiber.ErrBadRequest
					case "/slow-bad": // fails after its window has ended
						clock.advance(time.Second)
						return fiber.ErrBadRequest
					}
					return nil
				})
				var got []int
				for _, path := range []string{"/bad", "/bad", "/bad", "/ok", "/slow-bad", "/ok", "/ok", "/ok"} {
					got = append(got, get(t, app, path, "").StatusCode)
				}
				statuses[name] = got
			}
			assert.Equal(t, statuses["memory"], statuses["redis"])
			assert.Equal(t, []int{400, 400, 400, 200, 400}, statuses["redis"][:5], "failed requests must be free")
		})
	}
}

// Replicas whose clocks are seconds apart agree when Redis keeps the time,
// and do not when each sends its own (the reason server TIME is default).
func TestRedisClockSkew(t *testing.T) {
	server := redistest.Start(t)
	skewed := func(offset time.Duration) func() int64 {
		return func() int64 { return time.Now().Add(offset).UnixMilli() }
	}
	run := func(clocks []func() int64, key string) int {
		var replicas []fasthttp.RequestHandler
		for _, clock := range clocks {
			cfg := Config{Max: 10, Expiration: 5 * time.Second, Storage: redis.New(server.Client(t))}
			cfg.clock = clock
			replicas = append(replicas, replicaHandler(strict(cfg)))
		}
		return hammer(t, replicas, key, 40, 1)
	}
	require.Equal(t, 10, run([]func() int64{nil, nil}, "server-time"))
	require.Greater(t, run([]func() int64{skewed(0), skewed(7 * time.Second)}, "client-time"), 10,
		"client clocks 7 s apart should disagree on the window")
}

// SCRIPT FLUSH in a loop during load is not a storage failure: the store
// reloads the script with EVAL, no failure reaches OnStorageError, and
// every key is admitted exactly Max times across the replicas.
func TestRedisScriptFlushUnderLoad(t *testing.T) {
	for _, tc := range faultEveryPolicyBothWays() {
		policy := tc.policy
		t.Run(tc.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			var hookCalls atomic.Int64
			replicas := faultReplicas(t, srv, tc.kind, faultReplicaN, func(int) Config {
				cfg := faultConfig(policy)
				cfg.StorageTimeout = faultCallsTimeout
				cfg.OnStorageError = func(error) { hookCalls.Add(1) }
				return cfg
			})
			faultRequireExact(t, replicas, "warm")
			ctx := context.Background()
			require.NoError(t, admin.ConfigResetStat(ctx).Err())

			var stop atomic.Bool
			var flushes atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for !stop.Load() {
					if admin.ScriptFlush(ctx).Err() == nil {
						flushes.Add(1)
					}
					time.Sleep(time.Millisecond) // pacing, so that scripts run between flushes
				}
			}()
			for k := range 20 {
				faultRequireExact(t, replicas, "flush-"+strconv.Itoa(k))
			}
			stop.Store(true)
			<-done

			evals := redistest.CommandCalls(t, admin, "eval")
			t.Logf("%d flushes, %d EVAL reloads, %d EVALSHA, hook calls %d",
				flushes.Load(), evals, redistest.CommandCalls(t, admin, "evalsha"), hookCalls.Load())
			require.Positive(t, flushes.Load())
			require.Positive(t, evals, "no request found its script flushed")
			require.Zero(t, hookCalls.Load(), "a flushed script reached OnStorageError")
		})
	}
}
