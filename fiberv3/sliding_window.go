package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// SlidingWindow admits a request while the two-counter estimate
// previous*(1-elapsed/Expiration) + current + cost stays within Max, as
// Fiber and Cloudflare estimate it: no boundary burst.
type SlidingWindow struct{}

// New returns the rate-limiting handler for config using the sliding window.
func (SlidingWindow) New(config *Config) fiber.Handler {
	return newHandler(config, quota.SlidingWindow)
}
