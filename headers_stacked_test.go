package limiter

// Headers of limiters in a row: every RateLimit member, and a Retry-After covering those in front.

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// Two limiters in a row with different policy names: the IETF fields list
// both policies, so a client sees the tighter one too; a handler after the
// limiter reads the headers by their usual names.
func TestIETFHeadersOfStackedLimiters(t *testing.T) {
	app := fiber.New()
	app.Use(New(Config{Max: 1, Expiration: 10 * time.Second, Headers: HeadersIETF, PolicyName: "burst"}))
	app.Use(New(Config{Max: 1000, Expiration: time.Hour, Headers: HeadersBoth, PolicyName: "hourly"}))
	var seen []string
	app.Get("/", func(c *fiber.Ctx) error {
		seen = append(seen, c.GetRespHeader("RateLimit-Policy"), c.GetRespHeader("RateLimit"), c.GetRespHeader("X-RateLimit-Limit"))
		return c.SendString("ok")
	})
	resp := get(t, app, "/", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"burst";q=1;w=10, "hourly";q=1000;w=3600`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"burst";r=0;t=10, "hourly";r=999;t=3600`, resp.Header.Get("RateLimit"))
	assert.Equal(t, []string{"", "", ""}, seen, "written once the handler has run, as in Fiber")
	for _, field := range []string{"RateLimit-Policy", "RateLimit"} {
		list, err := httpsfv.UnmarshalList([]string{resp.Header.Get(field)})
		require.NoError(t, err)
		require.Len(t, list, 2, field)
		assert.Equal(t, "burst", list[0].(httpsfv.Item).Value)
		assert.Equal(t, "hourly", list[1].(httpsfv.Item).Value)
	}
	resp = get(t, app, "/", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, `"burst";r=0;t=10`, resp.Header.Get("RateLimit"), "rejected by the first: the second did not run")
}

// Two limiters in a row, in each header mode: the one in front admits the
// second request with its quota spent for an hour, the one behind rejects
// it for 10 s. Retry-After is the hour, since a retry in 10 s would be
// rejected in front, and it is never earlier than the t of a RateLimit
// member whose r is 0. The X-RateLimit fields are the rejecting limiter's.
func TestRetryAfterCoversLimitersInFront(t *testing.T) {
	for _, mode := range []HeaderMode{HeadersXRateLimit, HeadersIETF, HeadersBoth, HeadersNone} {
		t.Run(mode.String(), func(t *testing.T) {
			front := Config{Max: 2, Expiration: time.Hour, Headers: mode}
			back := Config{Max: 1, Expiration: 10 * time.Second, Headers: mode}
			if mode == HeadersIETF || mode == HeadersBoth {
				front.PolicyName, back.PolicyName = "hourly", "burst"
			}
			app := fiber.New()
			app.Use(New(front), New(back))
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			// The limiter in front, on its way out, makes it its own
			// wait, whatever its headers.
			assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
			if mode == HeadersXRateLimit || mode == HeadersBoth {
				assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Limit"), "the rejecting limiter's")
			}
			if v := resp.Header.Get("RateLimit"); v != "" {
				list, err := httpsfv.UnmarshalList([]string{v})
				require.NoError(t, err)
				require.Len(t, list, 2, v)
				retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
				require.NoError(t, err)
				for _, m := range list {
					params := m.(httpsfv.Item).Params
					r, _ := params.Get("r")
					tt, _ := params.Get("t")
					if r.(int64) == 0 {
						assert.GreaterOrEqual(t, retry, tt.(int64), "Retry-After earlier than t of %v in %q", m.(httpsfv.Item).Value, v)
					}
				}
			}
		})
	}
}

// FailClosed's 503 behind a limiter whose quota is spent: Retry-After is
// the front limiter's hour, not the breaker's cool-down of a second.
func TestFailClosedRetryAfterCoversLimitersInFront(t *testing.T) {
	for _, mode := range []HeaderMode{HeadersXRateLimit, HeadersIETF} {
		t.Run(mode.String(), func(t *testing.T) {
			failing := newFlakyStorage(t)
			failing.mode.Store(storageErr)
			app := fiber.New()
			app.Use(
				New(Config{Max: 1, Expiration: time.Hour, Headers: mode}),
				New(Config{Max: 10, Storage: failing, FailurePolicy: FailClosed, BreakerCooldown: time.Second, Headers: mode}),
			)
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			resp := get(t, app, "/", "")
			require.Equal(t, fiber.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
			if mode == HeadersXRateLimit {
				assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Limit"), "the 503 has none of its own: the front limiter's")
				assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
			}
		})
	}
	// Alone, the 503 says the cool-down.
	failing := newFlakyStorage(t)
	failing.mode.Store(storageErr)
	app := newApp(Config{Storage: failing, FailurePolicy: FailClosed, BreakerCooldown: time.Second}, nil, nil)
	resp := get(t, app, "/", "")
	require.Equal(t, fiber.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
}

// A limiter that writes no RateLimit field does not take a member with its
// own policy name for its own: the default-named member of an IETF limiter
// in front still counts.
func TestRetryAfterCoversAnIETFLimiterInFrontOfAnother(t *testing.T) {
	for _, back := range []HeaderMode{HeadersXRateLimit, HeadersNone} {
		t.Run(back.String(), func(t *testing.T) {
			app := fiber.New()
			app.Use(
				New(Config{Max: 2, Expiration: time.Hour, Headers: HeadersIETF}),
				New(Config{Max: 1, Expiration: 10 * time.Second, Headers: back}),
			)
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			assert.Equal(t, `"default";r=0;t=3600`, resp.Header.Get("RateLimit"))
			assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
		})
	}
}
