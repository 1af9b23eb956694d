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

// A state written in other time steps (the same key decided under another
// rule, or a value from elsewhere) lies far ahead of now in this rule's
// steps: it reads as no state, and cannot lock the key out for its
// decades.
func TestStateFromOtherStepsIsNoState(t *testing.T) {
	store := redis.New(redistest.Start(t).Client(t))
	ctx := context.Background()
	day := 24 * time.Hour
	first := redis.Rule{Algorithm: redis.FixedWindow, Limit: 100_000_000, Window: day}  // 4 ms steps
	second := redis.Rule{Algorithm: redis.FixedWindow, Limit: 200_000_000, Window: day} // 8 ms steps
	r, err := store.Take(ctx, "k", first, 100_000_000)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = store.Take(ctx, "k", second, 200_000_000)
	require.NoError(t, err)
	assert.True(t, r.Allowed, "the 4 ms state, read in 8 ms steps, is not a state of this rule")
	r, err = store.Take(ctx, "k", second, 1)
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	assert.LessOrEqual(t, r.RetryAfter, day, "a day's wait, not decades")

	// The in-memory twin reads such a state the same way.
	ls := one(newRule(200_000_000, 200_000_000, day, 200_000_000))
	sts := [maxLimits]state{{a: 1 << 46, b: 200_000_000}}
	v := algFixed.decide(&sts, 1<<40, &ls, 1)
	assert.True(t, v.allowed())
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
