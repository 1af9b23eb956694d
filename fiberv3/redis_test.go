package limiter

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v3"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// replica builds one Fiber v3 app around cfg, keyed by X-Key, and returns
// its handler.
func replica(cfg Config) fasthttp.RequestHandler {
	cfg.KeyGenerator = func(c fiber.Ctx) string { return c.Get("X-Key") }
	app := fiber.New()
	app.Use(New(cfg))
	app.Get("/*", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// serve sends GET / with X-Key key to h and returns the status and the
// X-RateLimit-Remaining header.
func serve(h fasthttp.RequestHandler, key string) (int, string) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	h(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("X-RateLimit-Remaining"))
}

// hammer sends requests for key spread over the replicas from callers
// goroutines and returns how many were admitted; any status but 200 and
// 429 fails the test.
func hammer(t *testing.T, replicas []fasthttp.RequestHandler, key string, requests, callers int) int {
	t.Helper()
	var next, admitted atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					return
				}
				switch code, _ := serve(replicas[i%int64(len(replicas))], key); code {
				case fiber.StatusOK:
					admitted.Add(1)
				case fiber.StatusTooManyRequests:
				default:
					t.Errorf("status %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	return int(admitted.Load())
}

var algorithms = []struct {
	name string
	mw   Handler
}{{"FixedWindow", FixedWindow{}}, {"SlidingWindow", SlidingWindow{}}, {"TokenBucket", TokenBucket{}}, {"SlidingLog", SlidingLog{}}}

// strict makes a Storage failure a 503 that hammer reports, with a
// timeout long enough for a loaded machine under the race detector, so
// that no request is decided by the per-replica fallback.
func strict(cfg Config) Config {
	cfg.FailurePolicy = FailClosed
	cfg.StorageTimeout = 10 * time.Second
	return cfg
}

// Three Fiber v3 replicas, each with its own gofiber/storage/redis/v3
// client, share one Redis: exactly Max of 300 concurrent requests are
// admitted, for each algorithm.
func TestExactAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := fiberredis.New(fiberredis.Config{Addrs: []string{server.Addr()}, PoolSize: 16})
				t.Cleanup(func() { _ = storage.Close() })
				replicas = append(replicas, replica(strict(Config{
					Max: 25, Expiration: time.Minute, Storage: storage, LimiterMiddleware: alg.mw, Name: "v3",
				})))
			}
			assert.Equal(t, 25, hammer(t, replicas, "exact-"+alg.name, 300, 24))
		})
	}
}

// The same on a Redis Cluster of 3 masters, with a cluster client per
// replica, over keys that spread over every master.
func TestExactOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := fiberredis.New(fiberredis.Config{Addrs: cluster.Addrs(), IsClusterMode: true, PoolSize: 16})
				t.Cleanup(func() { _ = storage.Close() })
				replicas = append(replicas, replica(strict(Config{
					Max: 7, Expiration: time.Minute, Storage: storage, LimiterMiddleware: alg.mw, Name: "v3",
				})))
			}
			for i := range 12 {
				key := alg.name + "-" + strconv.Itoa(i)
				assert.Equal(t, 7, hammer(t, replicas, key, 40, 12), key)
			}
		})
	}
}

// ExpirationFunc sets each request's window, in memory and on Redis: a
// client on a 2 s window gets its quota back after it, while one on an
// hour's stays spent, and each window keeps its own count. The clock is
// the test's; Redis drops keys by its own, a key's TTL being its window
// or more, so the windows are long enough for a loaded machine.
func TestExpirationFunc(t *testing.T) {
	server := redistest.Start(t)
	backends := map[string]func() fiber.Storage{
		"memory": func() fiber.Storage { return nil },
		"redis": func() fiber.Storage {
			storage := fiberredis.New(fiberredis.Config{Addrs: []string{server.Addr()}})
			t.Cleanup(func() { _ = storage.Close() })
			return storage
		},
	}
	for name, storage := range backends {
		for _, alg := range algorithms {
			t.Run(name+"/"+alg.name, func(t *testing.T) {
				now := time.Now().UnixMilli()
				var clock atomic.Int64
				clock.Store(now)
				cfg := Config{
					Max: 2, Expiration: time.Hour, LimiterMiddleware: alg.mw, Name: alg.name,
					ExpirationFunc: func(c fiber.Ctx) time.Duration {
						if c.Get("X-Key") == "fast" {
							return 2 * time.Second
						}
						return time.Hour
					},
					clock: clock.Load,
				}
				if s := storage(); s != nil {
					cfg.Storage = s
				}
				h := replica(strict(cfg))
				for _, key := range []string{"fast", "slow"} {
					for range 2 {
						code, _ := serve(h, key)
						require.Equal(t, fiber.StatusOK, code, key)
					}
					code, _ := serve(h, key)
					require.Equal(t, fiber.StatusTooManyRequests, code, key)
				}
				clock.Add(5000) // two fast windows, a fraction of the slow one
				code, remaining := serve(h, "fast")
				assert.Equal(t, fiber.StatusOK, code, "fast: its window has passed")
				assert.Equal(t, "1", remaining)
				code, _ = serve(h, "slow")
				assert.Equal(t, fiber.StatusTooManyRequests, code, "slow: within its hour")
			})
		}
	}
}
