package limiter

// Redis benchmarks of this limiter's Redis store, directly and as Fiber
// middleware, beside Fiber's own limiter on gofiber/storage/redis:
// decisions per second, and admissions across replicas. Each benchmark
// function starts its own redis-server on a free loopback port
// (internal/redistest) and is skipped when there is none.
//
// The comparisons with go-redis/redis_rate live in the bench module, so that
// this module's go.mod does without it: decisions per second, their ratios
// and Redis's CPU per decision in its figures 3, 3b and 3c (cd bench && go
// run . -only 3), the commands behind a decision and the memory of a key in
// its BenchmarkRedisCommandsPerDecision and BenchmarkRedisMemoryPerKey.
//
// The decisions table needs many decisions per sub-benchmark;
// BenchmarkRedisReplicasAdmitted repeats a whole measurement per b.N
// iteration, so it runs once (it skips itself when b.N > 100, as with a
// large -benchtime=Nx meant for the table):
//
//	go test -run '^$' -bench 'BenchmarkRedisDecisions' -benchtime=30000x -benchmem -count=1 .
//	go test -run '^$' -bench 'BenchmarkRedisReplicasAdmitted' -benchtime=1x -benchmem -count=1 .
//
// Decisions: keys=hot is one key per variant; keys=100k cycles over 100,000
// distinct keys with a cursor per variant that carries on across the
// callers' sub-benchmarks, so with 30000x (3 × 30,001 < 100,000 decisions
// per variant) every decision is a key's first: a new client, whose GET
// misses and whose SET creates the key.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	fiberredis "github.com/gofiber/storage/redis/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// rbKeySpace is the number of distinct keys of keys=100k; index rbKeySpace
// of a key list is the hot key.
const rbKeySpace = 100_000

// rbMax admits everything: 10^9 per minute. Ours panics at New when Max ×
// Expiration is beyond its exact arithmetic: 10^9 × 6·10^7 µs = 6·10^16 <
// 2^60, 10^9 × 6·10^4 ms = 6·10^13 < 2^51, and 10^9 < 2^32.
const rbMax = 1_000_000_000

var rbClientKeys = sync.OnceValue(func() []string {
	return rbPrefixed("")
})

// rbPrefixed returns prefix + "client-<i>" for every i, then prefix + "hot".
func rbPrefixed(prefix string) []string {
	keys := make([]string, rbKeySpace+1)
	for i := range rbKeySpace {
		keys[i] = prefix + "client-" + strconv.Itoa(i)
	}
	keys[rbKeySpace] = prefix + "hot"
	return keys
}

// rbVariant is one way of making a Redis decision. open connects a fresh
// client (pool connections) and returns decide, which makes one decision
// for the key of index i and fails unless it admits, and done, which
// closes everything open made.
type rbVariant struct {
	name string
	open func(b *testing.B, srv *redistest.Server, pool int) (decide func(i int) error, done func())
}

func rbClient(srv *redistest.Server, pool int) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: pool})
}

func rbHeaderKey(c *fiber.Ctx) string { return c.Get("X-Key") }

// rbApp is a Fiber app with mw, served through app.Handler().
func rbApp(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(mw)
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// rbServe sends one request with a fresh RequestCtx and X-Key: key, and
// returns its status.
func rbServe(h fasthttp.RequestHandler, key string) int {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	h(ctx)
	return ctx.Response.StatusCode()
}

func rbHandlerDecide(h fasthttp.RequestHandler, keys []string) func(int) error {
	return func(i int) error {
		if code := rbServe(h, keys[i]); code != fiber.StatusOK {
			return fmt.Errorf("key %q: status %d, want 200", keys[i], code)
		}
		return nil
	}
}

func rbStoreVariant(name string, alg redisengine.Algorithm, tag string, opts ...redis.Option) rbVariant {
	return rbVariant{name, func(b *testing.B, srv *redistest.Server, pool int) (func(int) error, func()) {
		store := redis.New(rbClient(srv, pool), opts...)
		engine := redisengine.OfStore(store) // the script calls the limiter makes
		keys := rbPrefixed("store:" + tag + ":")
		rule := redisengine.Rule{Algorithm: alg, Max: rbMax, Expiration: time.Minute}
		ctx := context.Background()
		decide := func(i int) error {
			res, err := engine.Take(ctx, keys[i], rule, 1)
			if err != nil {
				return err
			}
			if !res.Allowed {
				return fmt.Errorf("key %q denied: %+v", keys[i], res)
			}
			return nil
		}
		return decide, func() { _ = store.Close() }
	}}
}

func rbHandlerVariant(name string, mw LimiterHandler) rbVariant {
	return rbVariant{name, func(b *testing.B, srv *redistest.Server, pool int) (func(int) error, func()) {
		store := redis.New(rbClient(srv, pool))
		h := rbApp(New(Config{
			Max: rbMax, Expiration: time.Minute, KeyGenerator: rbHeaderKey,
			Storage: store, LimiterMiddleware: mw, KeyPrefix: "handler:",
		}))
		return rbHandlerDecide(h, rbClientKeys()), func() { _ = store.Close() }
	}}
}

func rbVariants() []rbVariant {
	return []rbVariant{
		rbStoreVariant("store-fixed", redisengine.FixedWindow, "fw"),
		rbStoreVariant("store-sliding", redisengine.SlidingWindow, "sw"),
		rbStoreVariant("store-token", redisengine.TokenBucket, "tb"),
		rbStoreVariant("store-fixed-unpipelined", redisengine.FixedWindow, "fwu", redis.WithoutPipelining()),
		rbHandlerVariant("handler-fixed", FixedWindow{}),
		rbHandlerVariant("handler-token", TokenBucket{}),
		{"fiber-redis", func(b *testing.B, srv *redistest.Server, pool int) (func(int) error, func()) {
			storage := fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.Port, PoolSize: pool})
			h := rbApp(fiberlimiter.New(fiberlimiter.Config{
				Max: rbMax, Expiration: time.Minute, KeyGenerator: rbHeaderKey, Storage: storage,
			}))
			return rbHandlerDecide(h, rbClientKeys()), func() { _ = storage.Close() }
		}},
	}
}

// rbDecide makes n decisions from exactly callers goroutines, which pull
// indexes 0..n-1 from a shared counter, and returns the time taken.
// key maps a decision's index to its key's index.
func rbDecide(n, callers int, decide func(int) error, key func(int) int) (time.Duration, error) {
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || firstErr.Load() != nil {
					return
				}
				if err := decide(key(int(i))); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr.Load(); err != nil {
		return elapsed, *err
	}
	return elapsed, nil
}

func rbHot(int) int { return rbKeySpace }

// BenchmarkRedisDecisions measures Redis decisions per second for every
// variant, at 1, 8 and 64 callers, on one hot key and over 100,000 keys.
func BenchmarkRedisDecisions(b *testing.B) {
	srv := redistest.Start(b)
	cursors := map[string]*atomic.Int64{} // per variant, for keys=100k
	for _, keys := range []string{"hot", "100k"} {
		for _, callers := range []int{1, 8, 64} {
			for _, v := range rbVariants() {
				cursor := cursors[v.name]
				if cursor == nil {
					cursor = new(atomic.Int64)
					cursors[v.name] = cursor
				}
				b.Run(fmt.Sprintf("keys=%s/callers=%d/%s", keys, callers, v.name), func(b *testing.B) {
					decide, done := v.open(b, srv, callers)
					defer done()
					key := rbHot
					if keys == "100k" {
						base := int(cursor.Add(int64(b.N))) - b.N
						key = func(i int) int { return (base + i) % rbKeySpace }
					}
					b.ReportAllocs()
					b.ResetTimer()
					elapsed, err := rbDecide(b.N, callers, decide, key)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				})
			}
		}
	}
}

// BenchmarkRedisReplicasAdmitted runs 3 Fiber apps ("replicas"), each with
// its own Redis client, and sends 5000 requests for one key from 96
// goroutines spread over them, with Max 1000 per 1000h; it reports how many
// were admitted (the mean over b.N rounds, a fresh key each). Fiber's
// limiter reads and writes its storage in two commands under a per-process
// lock; ours detects the fiberredis storage through Conn() and decides in
// one script. Ours' replicas share a Name, as processes running the same
// code would (without one, New refuses a second limiter of this process on
// the same Redis and prefix).
func BenchmarkRedisReplicasAdmitted(b *testing.B) {
	const replicas, callers, requests, limit = 3, 96, 5000, 1000
	srv := redistest.Start(b)
	variants := []struct {
		name string
		mw   func(fiber.Storage) fiber.Handler
	}{
		{"fiber-fixed", func(s fiber.Storage) fiber.Handler {
			return fiberlimiter.New(fiberlimiter.Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s})
		}},
		{"fiber-sliding", func(s fiber.Storage) fiber.Handler {
			return fiberlimiter.New(fiberlimiter.Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s,
				LimiterMiddleware: fiberlimiter.SlidingWindow{}})
		}},
		{"ours-fixed", func(s fiber.Storage) fiber.Handler {
			return New(Config{Name: "replicas", Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s})
		}},
		{"ours-sliding", func(s fiber.Storage) fiber.Handler {
			return New(Config{Name: "replicas", Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s, LimiterMiddleware: SlidingWindow{}})
		}},
		{"ours-token", func(s fiber.Storage) fiber.Handler {
			return New(Config{Name: "replicas", Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s, LimiterMiddleware: TokenBucket{}})
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			redistest.MeasureOnce(b)
			handlers := make([]fasthttp.RequestHandler, replicas)
			for i := range handlers {
				storage := fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.Port, PoolSize: callers})
				defer func() { _ = storage.Close() }()
				handlers[i] = rbApp(v.mw(storage))
			}
			b.ReportAllocs()
			total := 0
			for round := range b.N {
				key := "replicas-" + v.name + "-" + strconv.Itoa(round) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				var admitted atomic.Int64
				_, err := rbDecide(requests, callers, func(i int) error {
					switch code := rbServe(handlers[i%replicas], key); code {
					case fiber.StatusOK:
						admitted.Add(1)
					case fiber.StatusTooManyRequests:
					default:
						return fmt.Errorf("status %d", code)
					}
					return nil
				}, func(i int) int { return i })
				if err != nil {
					b.Fatal(err)
				}
				total += int(admitted.Load())
			}
			b.ReportMetric(float64(total)/float64(b.N), "admitted")
		})
	}
}
