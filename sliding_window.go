package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// SlidingWindow admits a request while the estimate
//
//	previous * (1 - elapsed/Expiration) + current + cost <= Max
//
// where current counts the units admitted in the window now running,
// previous those of the window just before it, and elapsed is the time since
// the current window began (the two-counter estimate Fiber and Cloudflare
// use). It smooths the boundary burst of FixedWindow at the price of a third
// number per key. Windows are Expiration long and aligned to a key's first
// counted request; the count of a key restarts once both windows are empty.
type SlidingWindow struct{}

// New returns the rate-limiting handler for cfg using the sliding window.
func (SlidingWindow) New(cfg Config) fiber.Handler {
	return newHandler(cfg, quota.SlidingWindow)
}
