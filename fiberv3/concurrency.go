package limiter

import (
	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/gofiber/fiber/v3"
)

// Concurrency caps a key's requests in flight rather than a rate: at most
// Max run at once (across replicas with a Redis Storage), each holding a
// slot from before the handler until it ends, however it ends (a panic
// goes on). Expiration is the longest a slot stays taken when its process
// dies before giving it back: set it above the longest request. With
// MaxDelay a request waits up to that long for a slot instead of 429.
// Headers: Limit is Max, Remaining the free slots, Reset 0, a 429's
// Retry-After 1 second. Skip*Requests, MaxFunc, ExpirationFunc, Cost,
// IdempotencyKey, Limits, Burst, Lease, BlockFor and MinInterval make New
// panic. See the root package's Concurrency.
type Concurrency struct{}

// New returns the handler that caps the requests in flight per key.
func (Concurrency) New(config *Config) fiber.Handler {
	return buildHandler(config, adapter.Settings{Concurrency: true})
}
