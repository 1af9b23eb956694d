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

// SlidingWindow admits a request while the two-counter estimate
// previous*(1-elapsed/Expiration) + current + cost stays within Max, as
// Fiber and Cloudflare estimate it: no boundary burst.
type SlidingWindow struct{}

// New returns the rate-limiting handler for config using the sliding window.
func (SlidingWindow) New(config *Config) fiber.Handler {
	return newHandler(config, quota.SlidingWindow)
}

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

// TokenBucket gives each key a bucket of Burst tokens (default Max) that
// refills at Max tokens per Expiration; a request takes Cost tokens. Short
// bursts up to Burst, a long-run rate of Max per Expiration, no window
// edges.
type TokenBucket struct{}

// New returns the rate-limiting handler for config using the token bucket.
func (TokenBucket) New(config *Config) fiber.Handler {
	return newHandler(config, quota.TokenBucket)
}
