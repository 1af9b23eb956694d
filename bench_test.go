package limiter

import (
	rlheaders "github.com/fiberlimit/limiter/internal/headers"
	"reflect"
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

// serveOneAt is serveOne for a request stamped at, which is admitted. It
// reads the clock all the same, so that it costs what serveOne does.
func serveOneAt(h fasthttp.RequestHandler, ctx benchCtx, key []byte, at time.Time, b *testing.B) {
	ctx.Request.Header.SetBytesV("X-Key", key)
	ctx.Response.Reset()
	*ctx.time = time.Now()
	*ctx.time = at
	h(ctx.RequestCtx)
	if ctx.Response.StatusCode() != fiber.StatusOK {
		b.Fatalf("status %d, want %d", ctx.Response.StatusCode(), fiber.StatusOK)
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
					growStack(0)
					defer benchDone()
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

// BenchmarkFloor splits a hot-key request into what any limiter in this
// place pays: Fiber's dispatch to one more middleware (noop), reading the
// key (noop-key), and setting three response headers through fasthttp
// (noop-key-headers), beside this limiter with and without headers, with
// the IETF headers or both sets, and with an OnDecision hook that counts;
// and the sliding window, the token bucket and the sliding log.
func BenchmarkFloor(b *testing.B) {
	key := func(c *fiber.Ctx) string { return c.Get("X-Key") }
	// The floor's headers: three values formatted and set as the
	// limiter's writer sets them.
	setHeaders := func(c *fiber.Ctx) {
		var buf [20]byte
		h := &c.Response().Header
		h.SetCanonical(rlheaders.NameLimit, strconv.AppendInt(buf[:0], 100, 10))
		h.SetCanonical(rlheaders.NameRemaining, strconv.AppendInt(buf[:0], 50, 10))
		h.SetCanonical(rlheaders.NameReset, strconv.AppendInt(buf[:0], 60, 10))
	}
	variants := []benchVariant{
		{"baseline", nil},
		{"noop", func(int) fiber.Handler { return func(c *fiber.Ctx) error { return c.Next() } }},
		{"noop-key", func(int) fiber.Handler {
			return func(c *fiber.Ctx) error { _ = key(c); return c.Next() }
		}},
		{"noop-key-headers", func(int) fiber.Handler {
			return func(c *fiber.Ctx) error {
				_ = key(c)
				setHeaders(c)
				return c.Next()
			}
		}},
		{"fixed-noheaders", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, DisableHeaders: true})
		}},
		{"fixed", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key})
		}},
		{"sliding", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, LimiterMiddleware: SlidingWindow{}})
		}},
		{"token", func(max int) fiber.Handler {
			return New(Config{Max: max, Expiration: time.Minute, KeyGenerator: key, LimiterMiddleware: TokenBucket{}})
		}},
		// The log keeps an entry per unit of Max (at most 10,000), so its
		// row admits 100 a second with requests 20 ms apart (see below).
		{"log", func(int) fiber.Handler {
			return New(Config{Max: 100, Expiration: time.Second, KeyGenerator: key, LimiterMiddleware: SlidingLog{}})
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
			growStack(0)
			warmUp(h, ctx)
			b.ResetTimer()
			defer benchDone()
			if v.name == "log" {
				// Each request comes 20 ms after the one before, on a
				// clock of its own: the log always holds 50 entries.
				at := time.Now()
				for i := 0; i < b.N; i++ {
					at = at.Add(20 * time.Millisecond)
					serveOneAt(h, ctx, benchKeys[0], at, b)
				}
				return
			}
			for i := 0; i < b.N; i++ {
				serveOne(h, ctx, benchKeys[0], fiber.StatusOK, b)
			}
		})
	}
}

// growStack grows the benchmark goroutine's stack well past what a
// request needs before the first one, so that the runtime never moves the
// stack while a request is served: callgrind, which follows calls by the
// stack pointer, would take a moved stack for returns and lose track of
// serveOne (see docs/performance.md).
//
//go:noinline
func growStack(i int) byte {
	var room [64 << 10]byte
	room[i] = byte(i)
	return room[(i*7)%len(room)]
}

// warmUp serves a few thousand requests of another key before a Floor
// row's, outside serveOne, so that the row counts the steady state: the
// runtime fills the cache of an interface assertion at a call site on a
// random one of about a thousand misses, which would otherwise add a
// varying share of lookups to the first requests.
func warmUp(h fasthttp.RequestHandler, ctx benchCtx) {
	ctx.Request.Header.SetBytesV("X-Key", benchKeys[1])
	for range 5_000 {
		ctx.Response.Reset()
		*ctx.time = time.Now()
		h(ctx.RequestCtx)
		ctx.ResetUserValues() // as fasthttp's server does after each request
	}
}

// benchDone marks the end of a Floor row (or a serial Handler row) for
// callgrind, which writes its counts on entering it (--dump-before).
//
//go:noinline
func benchDone() {}
