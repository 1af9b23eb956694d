package limiter

import (
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// TokenBucket gives each key a bucket of Burst tokens (default Max) that
// refills at Max tokens per Expiration; a request takes Cost tokens. Short
// bursts up to Burst, a long-run rate of Max per Expiration, no window
// edges.
type TokenBucket struct{}

// New returns the rate-limiting handler for config using the token bucket.
func (TokenBucket) New(config *Config) fiber.Handler {
	return newHandler(config, quota.TokenBucket)
}
