package limiter

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With IdempotencyKey and SkipFailedRequests, a request that failed was
// given back, so its retries with the same id are decided and counted
// afresh: sending each id once as a failure and then retrying it cannot
// pass more than the limit plus the documented 8 repeats of the one
// admission that counted. A larger Cost under a known id is no repeat.
func TestIdempotencyAfterRefund(t *testing.T) {
	var clock testClock
	app := newApp(Config{
		Max: 1, Expiration: time.Hour, SkipFailedRequests: true,
		IdempotencyKey: IdempotencyKeyHeader,
		Cost: func(c *fiber.Ctx) int {
			n, err := strconv.Atoi(c.Query("cost", "1"))
			if err != nil {
				return 1
			}
			return n
		},
	}, &clock, func(c *fiber.Ctx) error {
		if c.Query("fail") != "" {
			return c.SendStatus(fiber.StatusBadRequest)
		}
		return c.SendString("ok")
	})
	send := func(path, id string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Idempotency-Key", id)
		resp, err := app.Test(req, -1)
		require.NoError(t, err)
		return resp.StatusCode
	}
	served := 0
	for i := range 5 {
		id := "id-" + strconv.Itoa(i)
		send("/?fail=1", id) // counted, then given back
		for range 8 {
			if send("/", id) == fiber.StatusOK {
				served++
			}
		}
	}
	assert.Equal(t, 1+7, served, "one admission that counted, and its repeats")
	assert.Equal(t, fiber.StatusTooManyRequests, get(t, app, "/", "").StatusCode, "the quota is spent")

	clock.advance(time.Hour)
	require.Equal(t, fiber.StatusOK, send("/", "id-big"))
	assert.Equal(t, fiber.StatusTooManyRequests, send("/?cost=5", "id-big"), "a larger cost is no repeat")
}
