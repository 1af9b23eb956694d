package limiter

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Header names, in the canonical form fasthttp stores, so that setting them
// needs no normalizing.
var (
	headerLimit      = []byte("X-RateLimit-Limit")
	headerRemaining  = []byte("X-RateLimit-Remaining")
	headerReset      = []byte("X-RateLimit-Reset")
	headerRetryAfter = []byte(fiber.HeaderRetryAfter)
)

// headerWriter sets the rate-limit headers of a decision on the response.
type headerWriter struct {
	enabled bool
	limit   []byte // X-RateLimit-Limit's value when it never changes (no MaxFunc)
}

// write sets X-RateLimit-Limit, -Remaining and -Reset (seconds until the
// quota is fully back, rounded up) unless disabled, and Retry-After (whole
// seconds, at least 1) on a rejection that can succeed later.
func (w headerWriter) write(c *fiber.Ctx, d Decision) {
	var buf [20]byte
	h := &c.Response().Header
	if w.enabled {
		if w.limit != nil {
			h.SetCanonical(headerLimit, w.limit)
		} else {
			h.SetCanonical(headerLimit, strconv.AppendInt(buf[:0], int64(d.Limit), 10))
		}
		h.SetCanonical(headerRemaining, strconv.AppendInt(buf[:0], int64(d.Remaining), 10))
		h.SetCanonical(headerReset, strconv.AppendInt(buf[:0], ceilSeconds(d.ResetAfter), 10))
	}
	if !d.Allowed && d.RetryAfter != InfDuration {
		h.SetCanonical(headerRetryAfter, strconv.AppendInt(buf[:0], max(1, ceilSeconds(d.RetryAfter)), 10))
	}
}

// ceilSeconds rounds a non-negative duration up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	n := int64(d / time.Second)
	if d%time.Second != 0 {
		n++
	}
	return n
}
