package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// TokenBucket gives each key a bucket of Burst tokens (default Max) that
// refills continuously at Max tokens per Expiration; a request takes Cost
// tokens (default 1) and is admitted while the bucket holds them. It allows
// short bursts up to Burst yet holds the long-run rate to Max per
// Expiration, and it has no window edges. Pick it for APIs whose clients
// send bursts, or whose requests differ in cost.
type TokenBucket struct{}

// New returns the rate-limiting handler for cfg using the token bucket.
func (TokenBucket) New(cfg Config) fiber.Handler {
	return newHandler(cfg, quota.TokenBucket)
}
