package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// SlidingLog keeps the time of every request it admitted in the last
// Expiration (a request of cost n counts n times) and admits a request
// while they, with its cost, stay within Max: at most Max in any window,
// exactly. For small, strict limits (5 logins per 15 minutes). A key keeps
// one entry per unit of Max, so Max is at most 10,000 (New panics above,
// and with MaxFunc): in memory 8 bytes per unit of Max per key, on Redis 6
// bytes per unit counted.
type SlidingLog struct{}

// New returns the rate-limiting handler for config using the sliding log.
func (SlidingLog) New(config *Config) fiber.Handler {
	return newHandler(config, quota.SlidingLog)
}
