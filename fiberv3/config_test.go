package limiter

// Config: Fiber v3's own limiter config compiles here, the defaults, and invalid values.

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/limiter"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fiberConfig is a config of Fiber v3's own limiter, every field set. The
// same text, with this package's name, is a Config of this package: see
// TestFiberConfigCompiles.
var fiberConfig = limiter.Config{
	Storage:                nil,
	LimiterMiddleware:      limiter.SlidingWindow{},
	Next:                   func(c fiber.Ctx) bool { return c.Path() == "/health" },
	MaxFunc:                func(fiber.Ctx) int { return 10 },
	ExpirationFunc:         func(fiber.Ctx) time.Duration { return 30 * time.Second },
	KeyGenerator:           func(c fiber.Ctx) string { return c.IP() },
	LimitReached:           func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusTooManyRequests) },
	Max:                    10,
	Expiration:             30 * time.Second,
	SkipFailedRequests:     false,
	SkipSuccessfulRequests: false,
	DisableHeaders:         false,
	DisableValueRedaction:  false,
}

// The config above, with only the package changed, builds a limiter of
// this package; its Handler interface has Fiber's method.
func TestFiberConfigCompiles(t *testing.T) {
	ours := Config{
		Storage:                nil,
		LimiterMiddleware:      SlidingWindow{},
		Next:                   func(c fiber.Ctx) bool { return c.Path() == "/health" },
		MaxFunc:                func(fiber.Ctx) int { return 10 },
		ExpirationFunc:         func(fiber.Ctx) time.Duration { return 30 * time.Second },
		KeyGenerator:           func(c fiber.Ctx) string { return c.IP() },
		LimitReached:           func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusTooManyRequests) },
		Max:                    10,
		Expiration:             30 * time.Second,
		SkipFailedRequests:     false,
		SkipSuccessfulRequests: false,
		DisableHeaders:         false,
		DisableValueRedaction:  false,
	}
	var _ interface{ New(*Config) fiber.Handler } = FixedWindow{}
	var _ interface {
		New(*limiter.Config) fiber.Handler
	} = fiberConfig.LimiterMiddleware
	app := fiber.New()
	app.Use(New(ours))
	app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
	resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/", nil))
	require.NoError(t, err)
	assert.Equal(t, fiber.StatusOK, resp.StatusCode)
	assert.Equal(t, "10", resp.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "9", resp.Header.Get("X-RateLimit-Remaining"))
}

// New without a config, and with FixedWindow{}.New(nil), limit 5 per
// minute by the client's address.
func TestDefaults(t *testing.T) {
	for name, h := range map[string]fiber.Handler{"New()": New(), "FixedWindow{}.New(nil)": FixedWindow{}.New(nil)} {
		t.Run(name, func(t *testing.T) {
			app := fiber.New()
			app.Use(h)
			app.Get("/", func(c fiber.Ctx) error { return c.SendString("ok") })
			for i := range 6 {
				resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/", nil))
				require.NoError(t, err)
				if i < 5 {
					assert.Equal(t, fiber.StatusOK, resp.StatusCode)
					assert.Equal(t, "60", resp.Header.Get("X-RateLimit-Reset"))
				} else {
					assert.Equal(t, fiber.StatusTooManyRequests, resp.StatusCode)
					assert.Equal(t, "60", resp.Header.Get("Retry-After"))
				}
			}
		})
	}
}

// An invalid config panics at New with a message that names the field.
func TestConfigPanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative Max", Config{Max: -1}, "limiter: Max is -1; it must be >= 0 (0 means the default)"},
		{"Burst without a bucket", Config{Burst: 3}, "limiter: Burst is 3 but only TokenBucket uses it; remove it or use TokenBucket{}"},
		{"Limits with ExpirationFunc", Config{Limits: []Limit{{Max: 1, Expiration: time.Second}}, ExpirationFunc: func(fiber.Ctx) time.Duration { return time.Second }},
			"limiter: Limits and ExpirationFunc are both set; ExpirationFunc sets the Expiration of a single limit: use Max and Expiration with it, or Limits without it"},
		{"bad Name", Config{Name: "a:b"}, `limiter: Name "a:b" contains ':'; it must not contain ':', '{' or '}' (it is a part of every key in Storage, and braces would make it a Redis Cluster hash tag)`},
		{"Headers and DisableHeaders", Config{DisableHeaders: true, Headers: HeadersIETF}, "limiter: DisableHeaders is true but Headers is IETF; set only Headers (HeadersNone)"},
		{"nil pointer algorithm", Config{LimiterMiddleware: (*SlidingWindow)(nil)}, "limiter: LimiterMiddleware is a nil *limiter.SlidingWindow; use FixedWindow{}, SlidingWindow{}, TokenBucket{}, SlidingLog{} or leave it nil for the default"},
		{"nil func algorithm", Config{LimiterMiddleware: funcHandler(nil)}, "limiter: LimiterMiddleware is a nil limiter.funcHandler; use FixedWindow{}, SlidingWindow{}, TokenBucket{}, SlidingLog{} or leave it nil for the default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, func() { New(tc.cfg) })
		})
	}
}

// funcHandler is a Handler of the user's own that is a func type, for the
// typed nil that New must refuse.
type funcHandler func(*Config) fiber.Handler

func (f funcHandler) New(cfg *Config) fiber.Handler { return f(cfg) }
