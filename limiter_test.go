package limiter

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
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
}

// headers is the rate-limit header set of a response, "" where absent.
type headers struct{ limit, remaining, reset, retryAfter string }

func headersOf(resp *http.Response) headers {
	return headers{
		resp.Header.Get("X-RateLimit-Limit"), resp.Header.Get("X-RateLimit-Remaining"),
		resp.Header.Get("X-RateLimit-Reset"), resp.Header.Get("Retry-After"),
	}
}

func TestStatusesAndHeaders(t *testing.T) {
	// Max 2 per 10 s. The clock stands still until the last request, 2.5 s on.
	tests := []struct {
		mw   LimiterHandler
		want []headers
	}{
		{FixedWindow{}, []headers{{"2", "1", "10", ""}, {"2", "0", "10", ""}, {"2", "0", "10", "10"}, {"2", "0", "8", "8"}}},
		// In the next window the two hits weigh 2*(1-e/10s): one more fits from e = 5 s.
		{SlidingWindow{}, []headers{{"2", "1", "20", ""}, {"2", "0", "20", ""}, {"2", "0", "20", "15"}, {"2", "0", "18", "13"}}},
		// The bucket refills one token per 5 s.
		{TokenBucket{}, []headers{{"2", "1", "5", ""}, {"2", "0", "10", ""}, {"2", "0", "10", "5"}, {"2", "0", "8", "3"}}},
	}
	for _, tt := range tests {
		t.Run(fiberName(tt.mw), func(t *testing.T) {
			clock := &testClock{}
			app := newApp(Config{Max: 2, Expiration: 10 * time.Second, LimiterMiddleware: tt.mw}, clock, nil)
			var got []headers
			var codes []int
			for i := range 4 {
				if i == 3 {
					clock.advance(2500 * time.Millisecond)
				}
				resp := get(t, app, "/", "")
				codes = append(codes, resp.StatusCode)
				got = append(got, headersOf(resp))
			}
			assert.Equal(t, []int{200, 200, 429, 429}, codes)
			assert.Equal(t, tt.want, got)
		})
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

func TestMillisecondWindows(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			clock := &testClock{}
			app := newApp(Config{Max: 1, Expiration: 100 * time.Millisecond, LimiterMiddleware: alg.mw}, clock, nil)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			require.Equal(t, "1", resp.Header.Get("Retry-After"), "sub-second waits round up to 1")
			clock.advance(200 * time.Millisecond) // two windows: even the sliding one has faded
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
		})
	}
}

func TestNextSkipsTheLimiter(t *testing.T) {
	app := newApp(Config{Max: 1, Next: func(c *fiber.Ctx) bool { return c.Path() == "/free" }}, &testClock{}, nil)
	for range 3 {
		resp := get(t, app, "/free", "")
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, resp.Header.Get("X-RateLimit-Limit"))
	}
	require.Equal(t, 200, get(t, app, "/", "").StatusCode)
	require.Equal(t, 429, get(t, app, "/", "").StatusCode)
}

func TestKeyGeneratorAndLimitReached(t *testing.T) {
	app := newApp(Config{
		Max:          1,
		KeyGenerator: headerKey,
		LimitReached: func(c *fiber.Ctx) error { return c.Status(fiber.StatusTeapot).SendString("slow down") },
	}, &testClock{}, nil)
	require.Equal(t, 200, get(t, app, "/", "a").StatusCode)
	require.Equal(t, 200, get(t, app, "/", "b").StatusCode)
	resp := get(t, app, "/", "a")
	require.Equal(t, fiber.StatusTeapot, resp.StatusCode)
	require.Equal(t, "60", resp.Header.Get("Retry-After"))
	require.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
}

func TestSkipRequests(t *testing.T) {
	// The handler answers by path: /ok 200, /bad 400 via status, /err a
	// returned *fiber.Error 503, /boom a plain error (500).
	final := func(c *fiber.Ctx) error {
		switch c.Path() {
		case "/bad":
			return c.SendStatus(fiber.StatusBadRequest)
		case "/err":
			return fiber.NewError(fiber.StatusServiceUnavailable, "down")
		case "/boom":
			return errors.New("boom")
		}
		return c.SendString("ok")
	}
	tests := []struct {
		name         string
		cfg          Config
		path         string
		wantStatus   int
		wantFreeRuns bool // the requests are all credited back
	}{
		{"failed status is skipped", Config{SkipFailedRequests: true}, "/bad", 400, true},
		{"fiber.Error counts as failed", Config{SkipFailedRequests: true}, "/err", 503, true},
		{"plain error counts as failed", Config{SkipFailedRequests: true}, "/boom", 500, true},
		{"success is counted with SkipFailed", Config{SkipFailedRequests: true}, "/ok", 200, false},
		{"success is skipped", Config{SkipSuccessfulRequests: true}, "/ok", 200, true},
		{"failure is counted with SkipSuccessful", Config{SkipSuccessfulRequests: true}, "/err", 503, false},
	}
	for _, tt := range tests {
		for _, alg := range algorithms {
			t.Run(tt.name+"/"+alg.name, func(t *testing.T) {
				cfg := tt.cfg
				cfg.Max, cfg.LimiterMiddleware = 2, alg.mw
				app := newApp(cfg, &testClock{}, final)
				for i := range 5 {
					resp := get(t, app, tt.path, "")
					if tt.wantFreeRuns || i < 2 {
						require.Equal(t, tt.wantStatus, resp.StatusCode, "request %d", i)
					} else {
						require.Equal(t, 429, resp.StatusCode, "request %d", i)
					}
				}
			})
		}
	}
}

func TestMaxFuncAndCost(t *testing.T) {
	clock := &testClock{}
	app := newApp(Config{
		KeyGenerator: headerKey,
		MaxFunc: func(c *fiber.Ctx) int {
			n, _ := strconv.Atoi(c.Get("X-Plan"))
			return n
		},
		Cost: func(c *fiber.Ctx) int {
			if c.Path() == "/expensive" {
				return 3
			}
			return 1
		},
	}, clock, nil)
	send := func(path, key, plan string) *http.Response {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("X-Key", key)
		req.Header.Set("X-Plan", plan)
		resp, err := app.Test(req, -1)
		require.NoError(t, err)
		return resp
	}
	// Plan 0: unlimited, no headers.
	for range 10 {
		resp := send("/", "free", "0")
		require.Equal(t, 200, resp.StatusCode)
		require.Empty(t, resp.Header.Get("X-RateLimit-Limit"))
	}
	// Plan 4: one expensive (3) and one cheap (1), then nothing.
	require.Equal(t, "1", send("/expensive", "pro", "4").Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, 200, send("/", "pro", "4").StatusCode)
	require.Equal(t, 429, send("/", "pro", "4").StatusCode)
	// Cost above the limit: never, so no Retry-After.
	resp := send("/expensive", "tiny", "2")
	require.Equal(t, 429, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, "2", resp.Header.Get("X-RateLimit-Remaining"))
}

func TestNegativeCostFailsTheRequest(t *testing.T) {
	app := newApp(Config{Cost: func(*fiber.Ctx) int { return -1 }}, &testClock{}, nil)
	require.Equal(t, 500, get(t, app, "/", "").StatusCode)
}

func TestDisableHeaders(t *testing.T) {
	app := newApp(Config{Max: 1, DisableHeaders: true}, &testClock{}, nil)
	require.Empty(t, get(t, app, "/", "").Header.Get("X-RateLimit-Limit"))
	resp := get(t, app, "/", "")
	require.Equal(t, 429, resp.StatusCode)
	require.Empty(t, resp.Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, "60", resp.Header.Get("Retry-After"))
}

func TestConcurrentRequestsAdmitExactlyMax(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			const max, callers = 50, 200
			app := newApp(Config{Max: max, Expiration: time.Hour, LimiterMiddleware: alg.mw}, nil, nil)
			var admitted, rejected atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
					if !assert.NoError(t, err) {
						return
					}
					switch resp.StatusCode {
					case 200:
						admitted.Add(1)
					case 429:
						rejected.Add(1)
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(max), admitted.Load())
			require.Equal(t, int64(callers-max), rejected.Load())
		})
	}
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
