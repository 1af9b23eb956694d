package limiter

import (
	"context"
	"reflect"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/valyala/fasthttp"
)

// The handler benchmarks run one Fiber app per variant through app.Handler()
// with a reused fasthttp.RequestCtx, as fasthttp's server does. Each variant
// keys requests by the X-Key header; "baseline" is the same app without a
// limiter, so a variant's cost minus the baseline's is what the limiter adds.
//
//	go test -run '^$' -bench 'Handler' -benchmem
//
// Allowed: the limit is never reached. Denied: Max is 1, so after the first
// request of a key every request is rejected.

var benchKeys = func() [][]byte {
	keys := make([][]byte, 100_000)
	for i := range keys {
		keys[i] = []byte("client-" + strconv.Itoa(i))
	}
	return keys
}()

type benchVariant struct {
	name string
	mw   func(max int) fiber.Handler // nil: baseline
}

func benchVariants() []benchVariant {
	key := func(c *fiber.Ctx) string { return c.Get("X-Key") }
	ours := func(mw LimiterHandler) func(int) fiber.Handler {
		return func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, LimiterMiddleware: mw})
		}
	}
	// Two limits: max per minute and max per hour, decided together.
	oursTwo := func(mw LimiterHandler) func(int) fiber.Handler {
		return func(max int) fiber.Handler {
			return New(Config{Limits: []Limit{{Max: max, Expiration: time.Minute}, {Max: max, Expiration: time.Hour}},
				KeyGenerator: key, LimiterMiddleware: mw})
		}
	}
	fibers := func(mw fiberlimiter.LimiterHandler) func(int) fiber.Handler {
		return func(max int) fiber.Handler {
			return fiberlimiter.New(fiberlimiter.Config{Max: max, Expiration: time.Minute, KeyGenerator: key, LimiterMiddleware: mw})
		}
	}
	return []benchVariant{
		{"baseline", nil},
		{"fiber-fixed", fibers(fiberlimiter.FixedWindow{})},
		{"fiber-sliding", fibers(fiberlimiter.SlidingWindow{})},
		{"fixed", ours(FixedWindow{})},
		{"sliding", ours(SlidingWindow{})},
		{"token", ours(TokenBucket{})},
		{"fixed-2limits", oursTwo(FixedWindow{})},
		{"sliding-2limits", oursTwo(SlidingWindow{})},
		{"token-2limits", oursTwo(TokenBucket{})},
	}
}

func benchApp(v benchVariant, max int) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if v.mw != nil {
		app.Use(v.mw(max))
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// benchCtx is a request context that is reused like fasthttp's server
// reuses one per connection.
type benchCtx struct {
	*fasthttp.RequestCtx
	time *time.Time // the ctx's unexported time field
}

func newBenchCtx() benchCtx {
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	field := reflect.ValueOf(ctx).Elem().FieldByName("time")
	return benchCtx{ctx, (*time.Time)(unsafe.Pointer(field.UnsafeAddr()))}
}

// serveOne serves one request as fasthttp's server does: it stamps the
// context with the time (server.go: ctx.time = time.Now() before calling
// the handler; RequestCtx.Time() reads it), then calls the handler. Every
// variant, the baseline too, pays for the stamp.
func serveOne(h fasthttp.RequestHandler, ctx benchCtx, key []byte, want int, b *testing.B) {
	ctx.Request.Header.SetBytesV("X-Key", key)
	ctx.Response.Reset()
	*ctx.time = time.Now()
	h(ctx.RequestCtx)
	if ctx.Response.StatusCode() != want {
		b.Fatalf("status %d, want %d", ctx.Response.StatusCode(), want)
	}
}

func BenchmarkHandler(b *testing.B) {
	paths := []struct {
		name string
		max  int
		want int
	}{
		{"allowed", 1 << 26, fiber.StatusOK},
		{"denied", 1, fiber.StatusTooManyRequests},
	}
	for _, keys := range []int{1, len(benchKeys)} {
		for _, path := range paths {
			for _, v := range benchVariants() {
				want := path.want
				if v.mw == nil {
					want = fiber.StatusOK
				}
				name := "keys=" + strconv.Itoa(keys) + "/" + path.name + "/" + v.name
				b.Run(name+"/serial", func(b *testing.B) {
					h := benchApp(v, path.max)
					ctx := newBenchCtx()
					for i := range keys { // every key exists and, when denied, is spent
						serveOne(h, ctx, benchKeys[i], fiber.StatusOK, b)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						serveOne(h, ctx, benchKeys[i%keys], want, b)
					}
				})
				b.Run(name+"/parallel", func(b *testing.B) {
					h := benchApp(v, path.max)
					ctx := newBenchCtx()
					for i := range keys {
						serveOne(h, ctx, benchKeys[i], fiber.StatusOK, b)
					}
					var next atomic.Uint64
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						ctx := newBenchCtx()
						i := int(next.Add(7919))
						for pb.Next() {
							i++
							serveOne(h, ctx, benchKeys[i%keys], want, b)
						}
					})
				})
			}
		}
	}
}

// BenchmarkHeapPerKey tracks 1M keys in each in-memory store and reports the
// live heap per key beyond the key's own bytes (keys are 13 bytes), and how
// much of that heap is still held once every key has expired and traffic on
// other keys has gone on for a while.
func BenchmarkHeapPerKey(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	keyBytes := 0
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(100_000_000+i)
		keyBytes += len(keys[i])
	}
	key := func(c *fiber.Ctx) string { return c.Get("X-Key") }
	b.Run("ours", func(b *testing.B) {
		for range b.N {
			var clock testClock
			m := newManager(algFixed, 1, 2*n, clock.millis)
			ls := one(rule{limit: 10, burst: 10, window: int64(time.Minute / time.Millisecond)})
			ctx := context.Background()
			var lat, rebuilds latencies // of single takes, and of the rebuilds in them
			observeRebuild = rebuilds.add
			defer func() { observeRebuild = nil }()
			timed := func(k string) {
				start := time.Now()
				_, _ = m.take(ctx, k, &ls, 1)
				lat.add(time.Since(start))
			}
			before := liveHeap()
			for _, k := range keys {
				timed(k)
			}
			after := liveHeap()
			b.ReportMetric(float64(after-before-uint64(keyBytes))/n, "B/key")
			clock.advance(2 * time.Minute)
			for i := range 4 * n { // traffic on a few keys reclaims the rest
				timed(keys[i%1024])
			}
			held := liveHeap()
			lat.report(b, "take")
			rebuilds.report(b, "rebuild")
			b.ReportMetric(100*float64(held-before)/float64(after-before), "%held")
			runtime.KeepAlive(m)
		}
	})
	b.Run("fiber", func(b *testing.B) {
		for range b.N {
			h := fiber.New()
			h.Use(fiberlimiter.New(fiberlimiter.Config{Max: 10, Expiration: time.Second, KeyGenerator: key}))
			h.Get("/", func(c *fiber.Ctx) error { return nil })
			handler := h.Handler()
			ctx := newBenchCtx()
			before := liveHeap()
			for _, k := range keys {
				ctx.Request.Header.Set("X-Key", k)
				handler(ctx.RequestCtx)
			}
			after := liveHeap()
			b.ReportMetric(float64(after-before-uint64(keyBytes))/n, "B/key")
			time.Sleep(3 * time.Second) // Fiber's store expires by its own 1 s clock
			for i := range n {
				ctx.Request.Header.Set("X-Key", keys[i%1024])
				handler(ctx.RequestCtx)
			}
			held := liveHeap()
			b.ReportMetric(100*float64(held-before)/float64(after-before), "%held")
			runtime.KeepAlive(handler)
		}
	})
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// latencies is a histogram of durations in whole microseconds.
type latencies struct {
	counts [10_001]int // the last bucket holds 10 ms and more
	n      int
}

func (l *latencies) add(d time.Duration) {
	l.counts[min(int(d/time.Microsecond), len(l.counts)-1)]++
	l.n++
}

// quantile is the smallest bucket (µs) holding the q-th fraction of samples.
func (l *latencies) quantile(q float64) int {
	want, seen := min(l.n-1, int(q*float64(l.n))), 0
	for us, c := range l.counts {
		if seen += c; seen > want {
			return us
		}
	}
	return len(l.counts) - 1
}

func (l *latencies) report(b *testing.B, what string) {
	over := 0
	for _, c := range l.counts[1000:] {
		over += c
	}
	b.ReportMetric(float64(l.n), what+"s")
	b.ReportMetric(float64(l.quantile(0.999)), what+"-p99.9-µs")
	b.ReportMetric(float64(l.quantile(1)), what+"-max-µs")
	b.ReportMetric(float64(over), what+"s>1ms")
}

// BenchmarkFloor splits a hot-key request into what any limiter in this
// place pays: Fiber's dispatch to one more middleware (noop), reading the
// key (noop-key), and setting three response headers through fasthttp
// (noop-key-headers), beside this limiter with and without headers, with
// the IETF headers or both sets, and with an OnDecision hook that counts.
func BenchmarkFloor(b *testing.B) {
	key := func(c *fiber.Ctx) string { return c.Get("X-Key") }
	writer := headerWriter{xRateLimit: true, n: 1}
	floorLimits := one(rule{limit: 100, burst: 100, window: 60_000})
	floorVerdict := verdict{n: 1}
	floorVerdict.each[0] = Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Minute}
	variants := []benchVariant{
		{"baseline", nil},
		{"noop", func(int) fiber.Handler { return func(c *fiber.Ctx) error { return c.Next() } }},
		{"noop-key", func(int) fiber.Handler {
			return func(c *fiber.Ctx) error { _ = key(c); return c.Next() }
		}},
		{"noop-key-headers", func(int) fiber.Handler {
			return func(c *fiber.Ctx) error {
				_ = key(c)
				writer.write(c, &floorVerdict, "", &floorLimits, false)
				return c.Next()
			}
		}},
		{"fixed-noheaders", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, DisableHeaders: true})
		}},
		{"fixed", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key})
		}},
		{"fixed-ietf", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, Headers: HeadersIETF})
		}},
		{"fixed-both", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, Headers: HeadersBoth})
		}},
		{"fixed-hook", func(max int) fiber.Handler {
			var admitted atomic.Int64
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, OnDecision: func(_ *fiber.Ctx, e DecisionEvent) {
				if e.Allowed {
					admitted.Add(1)
				}
			}})
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			h := benchApp(v, 1<<26)
			ctx := newBenchCtx()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				serveOne(h, ctx, benchKeys[0], fiber.StatusOK, b)
			}
		})
	}
}
