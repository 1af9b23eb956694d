package limiter

// MaxFunc and ExpirationFunc filled in when unset, as Fiber v3 does, for every Handler.

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownHandler is a Handler of a user's own, written against Fiber v3's
// interface: it calls the config's MaxFunc and ExpirationFunc, which
// Fiber fills in when they are unset, and records what they return.
type ownHandler struct{ seen *string }

func (h ownHandler) New(cfg *Config) fiber.Handler {
	return func(c fiber.Ctx) error {
		*h.seen = fmt.Sprint(cfg.MaxFunc(c), " ", cfg.ExpirationFunc(c))
		return c.Next()
	}
}

// A Handler of the user's own gets MaxFunc and ExpirationFunc that return
// Max and Expiration when the config leaves them unset (as in Fiber v3),
// and the user's own when it sets them.
func TestOwnHandlerGetsMaxFuncAndExpirationFunc(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"unset", Config{Max: 7, Expiration: 30 * time.Second}, "7 30s"},
		{"defaults", Config{}, "5 1m0s"},
		{"ConfigDefault, Max changed", func() Config { c := ConfigDefault; c.Max = 9; return c }(), "9 1m0s"},
		{"set", Config{
			Max:            7,
			MaxFunc:        func(fiber.Ctx) int { return 3 },
			ExpirationFunc: func(fiber.Ctx) time.Duration { return time.Hour },
		}, "3 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen string
			tt.cfg.LimiterMiddleware = ownHandler{&seen}
			app := fiber.New()
			app.Use(New(tt.cfg))
			app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
			resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/", nil))
			require.NoError(t, err)
			assert.Equal(t, fiber.StatusOK, resp.StatusCode)
			assert.Equal(t, tt.want, seen)
		})
	}
	require.NotNil(t, ConfigDefault.MaxFunc)
	assert.Equal(t, 5, ConfigDefault.MaxFunc(nil))
}

// The built-in algorithms read the Max field when MaxFunc stands for it:
// a copy of ConfigDefault with another Max limits by that Max, not by
// ConfigDefault.MaxFunc's 5, and a filled-in config handed on to a
// built-in algorithm keeps its Max and Expiration.
func TestMaxFuncStandingForMax(t *testing.T) {
	fromDefault := ConfigDefault
	fromDefault.Max, fromDefault.Expiration = 100, time.Hour
	filled := configDefault(Config{Max: 8, Expiration: 2 * time.Minute})
	// A Handler of the user's own that changes Max and hands on.
	raised := Config{Max: 8, LimiterMiddleware: handOn{max: 12}}
	tests := []struct {
		name        string
		h           fiber.Handler
		limit, wait string
	}{
		{"a copy of ConfigDefault", New(fromDefault), "100", "3600"},
		{"a filled-in config", FixedWindow{}.New(&filled), "8", "120"},
		{"Max changed on the way", New(raised), "12", "60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := fiber.New()
			app.Use(tt.h)
			app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
			resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/", nil))
			require.NoError(t, err)
			assert.Equal(t, fiber.StatusOK, resp.StatusCode)
			assert.Equal(t, tt.limit, resp.Header.Get("X-RateLimit-Limit"))
			assert.Equal(t, tt.wait, resp.Header.Get("X-RateLimit-Reset"))
		})
	}
	assert.True(t, standsForMax(nil))
	assert.True(t, standsForMax(ConfigDefault.MaxFunc))
	assert.True(t, standsForMax(filled.MaxFunc))
	assert.False(t, standsForMax(func(fiber.Ctx) int { return 5 }))
	assert.True(t, standsForExpiration(filled.ExpirationFunc))
	assert.False(t, standsForExpiration(func(fiber.Ctx) time.Duration { return time.Minute }))
}

// handOn is a Handler of a user's own that sets Max and hands the config
// on to the fixed window.
type handOn struct{ max int }

func (h handOn) New(cfg *Config) fiber.Handler {
	cfg.Max = h.max
	return FixedWindow{}.New(cfg)
}

// The sliding log refuses a MaxFunc of the user's own, but not the one
// that stands for Max.
func TestSlidingLogTakesFilledMaxFunc(t *testing.T) {
	filled := configDefault(Config{Max: 3})
	assert.NotPanics(t, func() { SlidingLog{}.New(&filled) })
	assert.NotPanics(t, func() { New(Config{Max: 3, LimiterMiddleware: SlidingLog{}}) })
	assert.Panics(t, func() {
		New(Config{Max: 3, LimiterMiddleware: SlidingLog{}, MaxFunc: func(fiber.Ctx) int { return 3 }})
	})
}
