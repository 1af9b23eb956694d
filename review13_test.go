package limiter

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Policy names and keys carry a limit's window as configured, and a time
// step other than 1 ms, so that a state kept in other steps is another key.
func TestNamesOfLimitsInSteps(t *testing.T) {
	client := redistest.Start(t).Client(t)
	app := newApp(Config{
		Limits:  []Limit{{Max: 10, Expiration: time.Second}, {Max: 1_000_000_000, Expiration: 30 * 24 * time.Hour}},
		Headers: HeadersIETF,
		Storage: redis.New(client),
	}, nil, nil)
	resp := get(t, app, "/", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"default-1s";q=10;w=1, "default-720h";q=1000000000;w=2592000`, resp.Header.Get("RateLimit-Policy"))
	keys, err := client.Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"limiter::fw:1s+720h@1152ms:0.0.0.0"}, keys)
}

// Stacked limiters of this package under one policy name: the 429's
// RateLimit lists both, the rejecting limiter's spent member too.
func TestStackedLimitersOfOneName(t *testing.T) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(Config{Max: 10, Expiration: time.Minute, Headers: HeadersIETF}), New(Config{Max: 1, Expiration: 5 * time.Second, Headers: HeadersIETF}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	require.Equal(t, 200, get(t, app, "/", "").StatusCode)
	resp := get(t, app, "/", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, `"default";r=8;t=60, "default";r=0;t=5`, resp.Header.Get("RateLimit"))
}

// In front of another kind of limiter (Fiber's own) that rejects, this
// limiter, with its quota spent, makes Retry-After its own wait; and a
// rejection that can never succeed gets no Retry-After from it.
func TestRetryAfterOverOtherRejections(t *testing.T) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(Config{Max: 2, Expiration: time.Minute, Headers: HeadersIETF}))
	app.Use(fiberlimiter.New(fiberlimiter.Config{Max: 1, Expiration: 5 * time.Second}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	require.Equal(t, 200, get(t, app, "/", "").StatusCode)
	resp := get(t, app, "/", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, `"default";r=0;t=60`, resp.Header.Get("RateLimit"))
	assert.Equal(t, "60", resp.Header.Get("Retry-After"), "not Fiber's 5: a retry then would be rejected in front")

	never := fiber.New(fiber.Config{DisableStartupMessage: true})
	never.Use(New(Config{Max: 1, Expiration: time.Minute}))
	never.Use(New(Config{Max: 3, Expiration: time.Minute, Cost: func(*fiber.Ctx) int { return 5 }, KeyGenerator: func(*fiber.Ctx) string { return "b" }}))
	never.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	resp = get(t, never, "/", "")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("Retry-After"), "waiting would never help")
}
