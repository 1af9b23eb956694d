package limiter

import (
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/behaviour"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

// Once its key is tracked, a request through the in-memory middleware
// allocates nothing: admitted with values the header table holds (Max
// 100) and with values it formats (Max 2^26), rejected, for every
// algorithm, with either set of headers.
func TestMiddlewareAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	key := func(c *fiber.Ctx) string { return c.Get("X-Key") }
	algorithms := map[string]LimiterHandler{"fixed": FixedWindow{}, "sliding": SlidingWindow{}, "token": TokenBucket{}, "log": SlidingLog{}}
	for _, tt := range behaviour.AllocCases {
		for name, alg := range algorithms {
			max := tt.Max
			if name == "log" {
				max = min(max, 10_000) // the log's largest Max
			}
			mw := func(int) fiber.Handler {
				return New(Config{Max: max, Expiration: time.Hour, KeyGenerator: key, LimiterMiddleware: alg, Headers: tt.Mode})
			}
			h := benchApp(benchVariant{name: name, mw: mw}, max)
			ctx := newBenchCtx()
			ctx.Request.Header.Set("X-Key", "client")
			serve := func() {
				ctx.Response.Reset()
				*ctx.time = time.Now()
				h(ctx.RequestCtx)
			}
			serve()
			allocs := testing.AllocsPerRun(50, serve)
			assert.Equal(t, tt.Status, ctx.Response.StatusCode(), "%s, %s", tt.Name, name)
			assert.Zero(t, allocs, "%s, %s", tt.Name, name)
		}
	}
}

// One middleware serving two apps in turn, one normalizing names and one
// not, allocates nothing per request of its own once it has seen both: as
// many as the same two apps without it.
func TestSharedMiddlewareAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	allocs := func(mw fiber.Handler) float64 {
		var handlers []fasthttp.RequestHandler
		for _, normalizing := range []bool{true, false} {
			app := fiber.New(fiber.Config{DisableHeaderNormalizing: !normalizing, DisableStartupMessage: true})
			if mw != nil {
				app.Use(mw)
			}
			app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
			handlers = append(handlers, app.Handler())
		}
		ctx := newBenchCtx()
		serve := func() {
			for _, h := range handlers {
				ctx.Response.Reset()
				*ctx.time = time.Now()
				h(ctx.RequestCtx)
			}
		}
		serve()
		n := testing.AllocsPerRun(50, serve)
		assert.Equal(t, fiber.StatusOK, ctx.Response.StatusCode())
		return n
	}
	assert.Equal(t, allocs(nil), allocs(New(Config{Max: 1 << 26, Expiration: time.Hour})))
}

// A request through Concurrency{} in memory allocates nothing once its
// key is known: the slot is taken and given back in place.
func TestConcurrencyAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	mw := func(int) fiber.Handler {
		return New(Config{Max: 100, Expiration: time.Hour, KeyGenerator: func(c *fiber.Ctx) string { return c.Get("X-Key") },
			LimiterMiddleware: Concurrency{}})
	}
	h := benchApp(benchVariant{name: "concurrency", mw: mw}, 100)
	ctx := newBenchCtx()
	ctx.Request.Header.Set("X-Key", "client")
	serve := func() {
		ctx.Response.Reset()
		*ctx.time = time.Now()
		h(ctx.RequestCtx)
	}
	serve()
	assert.Zero(t, testing.AllocsPerRun(50, serve))
	assert.Equal(t, fiber.StatusOK, ctx.Response.StatusCode())
}
