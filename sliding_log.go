package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// SlidingLog keeps the time of every request it admitted in the last
// Expiration (a request of cost n counts n times) and admits a request
// while they, with its cost, stay within Max: at most Max in any window of
// Expiration, exactly, with no estimate and no boundary burst. The choice
// for small, strict limits, such as 5 logins per 15 minutes. X-Ratelimit-Reset
// is when the oldest counted request leaves the window.
//
// A key keeps one entry per unit of Max, so Max is at most 10,000 (New
// panics above, and with MaxFunc, whose Max varies): in memory 8 bytes per
// unit of Max per key, MaxKeys bounding the keys; on Redis 6 bytes per
// unit counted.
type SlidingLog struct{}

// New returns the rate-limiting handler for cfg using the sliding log.
func (SlidingLog) New(cfg Config) fiber.Handler {
	return newHandler(cfg, quota.SlidingLog)
}
