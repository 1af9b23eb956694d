package limiter

import (
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/behaviour"
	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

// Once its key is tracked, a request through the in-memory Fiber v3
// middleware allocates nothing of its own: the same request through the
// same app without the limiter is the baseline, for every algorithm,
// admitted with values the header table holds (Max 100) and with values
// it formats (Max 2^26), and rejected, with either set of headers.
func TestMiddlewareAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	key := func(c fiber.Ctx) string { return c.Get("X-Key") }
	app := func(mw fiber.Handler) fasthttp.RequestHandler {
		app := fiber.New()
		if mw != nil {
			app.Use(mw)
		}
		app.Get("/", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		return app.Handler()
	}
	allocs := func(h fasthttp.RequestHandler) (float64, int) {
		ctx := &fasthttp.RequestCtx{}
		ctx.Request.Header.SetMethod(fasthttp.MethodGet)
		ctx.Request.SetRequestURI("/")
		ctx.Request.Header.Set("X-Key", "client")
		serve := func() {
			ctx.Response.Reset()
			h(ctx)
		}
		serve()
		return testing.AllocsPerRun(50, serve), ctx.Response.StatusCode()
	}
	base, status := allocs(app(nil))
	assert.Equal(t, fiber.StatusOK, status)

	algorithms := map[string]Handler{"fixed": FixedWindow{}, "sliding": SlidingWindow{}, "token": TokenBucket{}, "log": SlidingLog{}}
	for _, tt := range behaviour.AllocCases {
		for name, alg := range algorithms {
			max := tt.Max
			if name == "log" {
				max = min(max, 10_000) // the log's largest Max
			}
			got, status := allocs(app(New(Config{Max: max, Expiration: time.Hour, KeyGenerator: key, LimiterMiddleware: alg, Headers: tt.Mode})))
			assert.Equal(t, tt.Status, status, "%s, %s", tt.Name, name)
			assert.Equal(t, base, got, "%s, %s: allocations per request, against %v without the limiter", tt.Name, name, base)
		}
	}
}
