package limiter

import (
	"errors"
	"io"
	"testing"

	"github.com/fiberlimit/limiter/internal/behaviour"
	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/require"
)

// fiberV3 is the behaviour table's adapter for this package: the Fiber v3
// middleware in front of the table's handler, served by app.Test.
type fiberV3 struct{}

var v3Algorithms = map[behaviour.Algorithm]Handler{
	behaviour.FixedWindow:   FixedWindow{},
	behaviour.SlidingWindow: SlidingWindow{},
	behaviour.TokenBucket:   TokenBucket{},
	behaviour.SlidingLog:    SlidingLog{},
	behaviour.Concurrency:   Concurrency{},
}

func (fiberV3) Serve(t *testing.T, bc behaviour.Config, clock *behaviour.Clock) func(behaviour.Request) behaviour.Response {
	cfg := Config{
		Max:                    bc.Max,
		Expiration:             bc.Expiration,
		SkipFailedRequests:     bc.SkipFailedRequests,
		SkipSuccessfulRequests: bc.SkipSuccessfulRequests,
		DisableHeaders:         bc.DisableHeaders,
		BlockFor:               bc.BlockFor,
		MinInterval:            bc.MinInterval,
		MaxDelay:               bc.MaxDelay,
	}
	if bc.Algorithm != "" {
		cfg.LimiterMiddleware = v3Algorithms[bc.Algorithm]
	}
	if bc.Idempotent {
		cfg.IdempotencyKey = IdempotencyKeyHeader
	}
	if bc.KeyFromHeader {
		cfg.KeyGenerator = func(c fiber.Ctx) string { return c.Get("X-Key") }
	}
	if bc.MaxFromHeader {
		cfg.MaxFunc = func(c fiber.Ctx) int { return behaviour.PlanOf(c.Get("X-Plan")) }
	}
	if path := bc.ExpensivePath; path != "" {
		cfg.Cost = func(c fiber.Ctx) int {
			if c.Path() == path {
				return 3
			}
			return 1
		}
	}
	if path := bc.NextPath; path != "" {
		cfg.Next = func(c fiber.Ctx) bool { return c.Path() == path }
	}
	if bc.Teapot {
		cfg.LimitReached = func(c fiber.Ctx) error { return c.Status(fiber.StatusTeapot).SendString("slow down") }
	}
	if clock != nil {
		cfg.clock = clock.Millis
	}
	app := fiber.New()
	if bc.Operate != nil {
		l := NewLimiter(cfg)
		bc.Operate(l)
		app.Use(l.Handler())
	} else {
		app.Use(New(cfg))
	}
	app.Get("/*", func(c fiber.Ctx) error {
		switch c.Path() {
		case behaviour.Bad:
			return c.SendStatus(fiber.StatusBadRequest)
		case behaviour.Err:
			return fiber.NewError(fiber.StatusServiceUnavailable, "down")
		case behaviour.Boom:
			return errors.New("boom")
		case behaviour.Hold:
			bc.Gate.Wait()
			return errors.New("boom")
		}
		return c.SendString("ok")
	})
	return func(r behaviour.Request) behaviour.Response {
		req := r.HTTP()
		resp, err := app.Test(req, fiber.TestConfig{Timeout: 0, FailOnTimeout: false})
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return behaviour.Response{Status: resp.StatusCode, Header: resp.Header}
	}
}

// The behaviour table, on the Fiber v3 middleware.
func TestBehaviourFiberV3(t *testing.T) {
	behaviour.Run(t, fiberV3{})
}
