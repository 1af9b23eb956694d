package limiter

// Headers written after the handler: behind proxy.Forward, under Fiber's cache, after a refund.

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/cache"
	"github.com/gofiber/fiber/v2/middleware/proxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startUpstream serves a Fiber app on a free loopback port until the test
// ends, and returns its base URL.
func startUpstream(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = app.Listener(ln)
	}()
	t.Cleanup(func() {
		require.NoError(t, app.Shutdown())
		<-done
	})
	return "http://" + ln.Addr().String()
}

// A gateway: the limiter in front of proxy.Forward to a real upstream
// Fiber server, which replaces the whole response. Every admitted response
// still carries the rate-limit headers, with the counts of this limiter,
// for each algorithm and header mode; the upstream's own X-RateLimit
// fields are overwritten, as Fiber's limiter does.
func TestHeadersBehindProxyForward(t *testing.T) {
	upstream := fiber.New(fiber.Config{DisableStartupMessage: true})
	upstream.Get("/", func(c *fiber.Ctx) error {
		c.Set("X-RateLimit-Limit", "999") // the upstream's own limit, which the gateway's replaces
		c.Set("X-Upstream", "yes")
		return c.SendString("from upstream")
	})
	url := startUpstream(t, upstream)
	for _, alg := range algorithms {
		for _, mode := range []HeaderMode{HeadersXRateLimit, HeadersIETF} {
			t.Run(alg.name+"/"+mode.String(), func(t *testing.T) {
				gateway := fiber.New(fiber.Config{DisableStartupMessage: true})
				gateway.Use(New(Config{Max: 3, Expiration: time.Minute, LimiterMiddleware: alg.mw, Headers: mode}))
				gateway.Get("/", proxy.Forward(url+"/"))
				for i := range 4 {
					resp := get(t, gateway, "/", "")
					if i == 3 {
						require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
						assert.NotEmpty(t, resp.Header.Get("Retry-After"))
						continue
					}
					require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
					assert.Equal(t, "yes", resp.Header.Get("X-Upstream"), "the upstream's response")
					remaining := strconv.Itoa(2 - i)
					if mode == HeadersXRateLimit {
						assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"), "request %d", i)
						assert.Equal(t, remaining, resp.Header.Get("X-RateLimit-Remaining"), "request %d", i)
						assert.NotEmpty(t, resp.Header.Get("X-RateLimit-Reset"), "request %d", i)
					} else {
						assert.Contains(t, resp.Header.Get("RateLimit"), `"default";r=`+remaining+";", "request %d", i)
						assert.Equal(t, `"default";q=3;w=60`, resp.Header.Get("RateLimit-Policy"), "request %d", i)
					}
				}
			})
		}
	}
}

// Fiber's cache with StoreResponseHeaders behind the limiter: a cache hit
// goes through the limiter, which counts it, and carries its fresh counts,
// not those the cache stored with the first response. In front of the
// limiter, a hit is answered by the cache alone, without a decision: with
// StoreResponseHeaders off (Fiber's default), it carries no rate-limit
// headers, so no stale count either.
func TestHeadersWithFiberCache(t *testing.T) {
	t.Run("limiter, then cache", func(t *testing.T) {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(New(Config{Max: 5, Expiration: time.Minute}))
		app.Use(cache.New(cache.Config{Expiration: time.Minute, StoreResponseHeaders: true}))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("cached") })
		for i := range 5 {
			resp := get(t, app, "/", "")
			require.Equal(t, 200, resp.StatusCode)
			if i > 0 {
				assert.Equal(t, "hit", resp.Header.Get("X-Cache"), "request %d", i)
			}
			assert.Equal(t, strconv.Itoa(4-i), resp.Header.Get("X-RateLimit-Remaining"), "request %d: this request's count", i)
		}
		assert.Equal(t, 429, get(t, app, "/", "").StatusCode, "hits count too")
	})
	t.Run("cache, then limiter", func(t *testing.T) {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(cache.New(cache.Config{Expiration: time.Minute}))
		app.Use(New(Config{Max: 5, Expiration: time.Minute}))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("cached") })
		resp := get(t, app, "/", "")
		assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"), "the miss, decided")
		for i := range 3 {
			resp := get(t, app, "/", "")
			require.Equal(t, "hit", resp.Header.Get("X-Cache"))
			assert.Empty(t, resp.Header.Get("X-RateLimit-Remaining"), "hit %d: not decided, no count", i)
		}
	})
}

// With SkipFailedRequests, a failed request's headers show the count after
// its refund, in memory and through a store, for each algorithm: the
// quota it did not spend.
func TestSkipHeadersAfterRefund(t *testing.T) {
	for _, alg := range algorithms {
		for _, b := range []struct {
			name    string
			storage func() fiber.Storage
		}{{"memory", nil}, {"storage", func() fiber.Storage { return newMapStorage() }}} {
			t.Run(alg.name+"/"+b.name, func(t *testing.T) {
				cfg := Config{Max: 3, Expiration: time.Minute, LimiterMiddleware: alg.mw, SkipFailedRequests: true, KeyGenerator: headerKey}
				if b.storage != nil {
					cfg.Storage = b.storage()
				}
				app := newApp(cfg, &testClock{}, func(c *fiber.Ctx) error {
					if c.Query("fail") != "" {
						return fiber.ErrInternalServerError
					}
					return c.SendString("ok")
				})
				resp := get(t, app, "/", "k")
				assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Remaining"))
				resp = get(t, app, "/?fail=1", "k")
				require.Equal(t, 500, resp.StatusCode)
				assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Remaining"), "after its refund")
				resp = get(t, app, "/", "k")
				assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Remaining"))
			})
		}
	}
}
