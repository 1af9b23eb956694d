package limiter

// Helpers shared by this package's tests: a test clock, an app around a limiter, requests, backends.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
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

// headerKey keys a request by its X-Key header.
func headerKey(c *fiber.Ctx) string { return c.Get("X-Key") }

// algorithms are this package's LimiterHandlers, by name.
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

// headersOf reads the X-RateLimit fields and Retry-After of resp.
func headersOf(resp *http.Response) headers {
	return headers{
		resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"),
		resp.Header.Get("X-RateLimit-Reset"), resp.Header.Get("Retry-After"),
	}
}

// fiberName names the algorithm of mw (FixedWindow, SlidingWindow or,
// for any other, TokenBucket).
func fiberName(mw LimiterHandler) string {
	switch mw.(type) {
	case FixedWindow:
		return "FixedWindow"
	case SlidingWindow:
		return "SlidingWindow"
	}
	return "TokenBucket"
}

// backendCase is where a test's limiters keep their state: in memory, or
// on a Redis that the test started, through a client of their own.
type backendCase struct {
	name    string
	storage func(t *testing.T) fiber.Storage // nil: in memory
}

// limitBackends are the in-memory manager and the Redis store, each test
// of them with a fresh redis-server.
func limitBackends() []backendCase {
	return []backendCase{
		{"memory", nil},
		{"redis", func(t *testing.T) fiber.Storage { return redis.New(redistest.Start(t).Client(t)) }},
	}
}

// config is cfg with b's Storage, whose failures are 503s (FailClosed) that
// a loaded machine does not cause (a long StorageTimeout).
func (b backendCase) config(t *testing.T, cfg Config) Config {
	if b.storage != nil {
		cfg.Storage = b.storage(t)
		cfg.FailurePolicy = FailClosed // a Redis failure shows as a 503, never as a local decision
		cfg.StorageTimeout = 10 * time.Second
	}
	return cfg
}
