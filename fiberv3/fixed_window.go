package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// FixedWindow admits at most Max units of cost per window of Expiration,
// the window starting at a key's first counted request. The cheapest
// algorithm; a client can spend 2*Max across the boundary of two windows.
// The default LimiterMiddleware, as in Fiber.
type FixedWindow struct{}

// New returns the rate-limiting handler for config using the fixed window.
func (FixedWindow) New(config *Config) fiber.Handler {
	return newHandler(config, quota.FixedWindow)
}
