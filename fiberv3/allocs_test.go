package limiter

import (
	"testing"
	"time"

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

	tests := []struct {
		name    string
		max     int
		headers HeaderMode
		status  int
	}{
		{"admitted, table values", 100, HeadersXRateLimit, fiber.StatusOK},
		{"admitted, formatted values", 1 << 26, HeadersXRateLimit, fiber.StatusOK},
		{"admitted, both header sets", 1 << 26, HeadersBoth, fiber.StatusOK},
		{"rejected", 1, HeadersXRateLimit, fiber.StatusTooManyRequests},
		{"rejected, both header sets", 1, HeadersBoth, fiber.StatusTooManyRequests},
	}
	algorithms := map[string]Handler{"fixed": FixedWindow{}, "sliding": SlidingWindow{}, "token": TokenBucket{}, "log": SlidingLog{}}
	for _, tt := range tests {
		for name, alg := range algorithms {
			max := tt.max
			if name == "log" {
				max = min(max, 10_000) // the log's largest Max
			}
			got, status := allocs(app(New(Config{Max: max, Expiration: time.Hour, KeyGenerator: key, LimiterMiddleware: alg, Headers: tt.headers})))
			assert.Equal(t, tt.status, status, "%s, %s", tt.name, name)
			assert.Equal(t, base, got, "%s, %s: allocations per request, against %v without the limiter", tt.name, name, base)
		}
	}
}
