package limiter

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
)

// testClock is a settable clock in ms.
type testClock struct{ now atomic.Int64 }

func (c *testClock) millis() int64           { return c.now.Load() }
func (c *testClock) advance(d time.Duration) { c.now.Add(d.Milliseconds()) }

// newApp serves GET /* with the limiter in front of ok, on a test clock.
func newApp(cfg Config, clock *testClock, final fiber.Handler) *fiber.App {
	if clock != nil {
		cfg.clock = clock.millis
	}
	if final == nil {
		final = func(c *fiber.Ctx) error { return c.SendString("ok") }
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(cfg))
	app.Get("/*", final)
	return app
}

// get sends GET path with the given X-Key header (none when empty).
func get(t *testing.T, app *fiber.App, path, key string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if key != "" {
		req.Header.Set("X-Key", key)
	}
	resp, err := app.Test(req, -1)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp
}

func headerKey(c *fiber.Ctx) string { return c.Get("X-Key") }

var algorithms = []struct {
	name string
	mw   LimiterHandler
}{
	{"FixedWindow", FixedWindow{}},
	{"SlidingWindow", SlidingWindow{}},
	{"TokenBucket", TokenBucket{}},
	{"SlidingLog", SlidingLog{}},
}

// headers is the rate-limit header set of a response, "" where absent.
type headers struct{ limit, remaining, reset, retryAfter string }

func headersOf(resp *http.Response) headers {
	return headers{
		resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"),
		resp.Header.Get("X-RateLimit-Reset"), resp.Header.Get("Retry-After"),
	}
}

func fiberName(mw LimiterHandler) string {
	switch mw.(type) {
	case FixedWindow:
		return "FixedWindow"
	case SlidingWindow:
		return "SlidingWindow"
	}
	return "TokenBucket"
}

func TestNegativeCostFailsTheRequest(t *testing.T) {
	app := newApp(Config{Cost: func(*fiber.Ctx) int { return -1 }}, &testClock{}, nil)
	require.Equal(t, 500, get(t, app, "/", "").StatusCode)
}

// A key from c.Get points into the request's buffer, which Fiber reuses;
// what the limiter keeps must not change with it, even when the handler
// rewrites the header in place before a refund.
func TestKeyIsCopiedBeforeKept(t *testing.T) {
	for _, cfg := range []Config{{}, {Storage: newMapStorage()}} {
		cfg.Max, cfg.KeyGenerator = 1, headerKey
		app := newApp(cfg, &testClock{}, nil)
		require.Equal(t, 200, get(t, app, "/", "aaaa").StatusCode)
		require.Equal(t, 200, get(t, app, "/", "bbbb").StatusCode)
		require.Equal(t, 429, get(t, app, "/", "aaaa").StatusCode)
		require.Equal(t, 429, get(t, app, "/", "bbbb").StatusCode)
	}
	cfg := Config{Max: 1, KeyGenerator: headerKey, SkipSuccessfulRequests: true}
	app := newApp(cfg, &testClock{}, func(c *fiber.Ctx) error {
		c.Request().Header.Set("X-Key", "zzzz")
		return c.SendString("ok")
	})
	for range 3 {
		require.Equal(t, 200, get(t, app, "/", "aaaa").StatusCode, "the refund must reach aaaa")
	}
}
