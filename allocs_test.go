package limiter

import (
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/behaviour"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
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
