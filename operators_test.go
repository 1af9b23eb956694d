package limiter

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// NewLimiter's controls take the key as the default KeyGenerator makes
// it, the client's address as text (in memory too, where New keys by the
// address's bytes), and a LimiterMiddleware that keeps no quota answers
// them with an error that names it.
func TestNewLimiterControls(t *testing.T) {
	ctx := context.Background()
	l := NewLimiter(Config{Max: 2, Expiration: time.Minute})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(l.Handler())
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	get := func() int {
		resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/", nil), -1)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, fiber.StatusOK, get())
	st, err := l.Peek(ctx, "0.0.0.0") // app.Test's client
	require.NoError(t, err)
	assert.Equal(t, 1, st.Tightest().Remaining)
	_, err = l.Block(ctx, "0.0.0.0", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, fiber.StatusTooManyRequests, get())
	require.NoError(t, l.Reset(ctx, "0.0.0.0"))
	assert.Equal(t, fiber.StatusOK, get())

	slots := NewLimiter(Config{Max: 2, LimiterMiddleware: Concurrency{}})
	require.NotNil(t, slots.Handler())
	_, err = slots.Peek(ctx, "k")
	assert.ErrorContains(t, err, "limiter: Peek: the LimiterMiddleware is limiter.Concurrency, which keeps no quota")
	assert.ErrorContains(t, slots.Reset(ctx, "k"), "limiter: Reset")
}
