package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// FixedWindow admits at most Max units of cost per window of Expiration. A
// key's window starts at its first counted request; when it has passed, the
// next counted request starts a new one. It is the cheapest algorithm and
// the easiest to explain, but a client can spend 2*Max across the boundary
// of two windows. This is the default LimiterMiddleware, as in Fiber.
type FixedWindow struct{}

// New returns the rate-limiting handler for cfg using the fixed window.
func (FixedWindow) New(cfg Config) fiber.Handler {
	return newHandler(cfg, quota.FixedWindow)
}
