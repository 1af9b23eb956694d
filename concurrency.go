package limiter

import (
	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/gofiber/fiber/v2"
)

// Concurrency caps a key's requests in flight rather than a rate: at most
// Max of them run at once, across replicas when Storage is Redis. A
// request takes one of its key's slots before the handler and gives it
// back when the handler ends, however it ends: a value, an error, a panic
// (which goes on). Expiration is the longest a slot stays taken when its
// process dies before giving it back, so set it above your longest
// request: a slot held longer comes back to the key while its request
// still runs. With MaxDelay, a request waits up to that long for a free
// slot (at most MaxWaiting at once) instead of 429.
//
// X-RateLimit-Limit is Max and X-RateLimit-Remaining the key's free
// slots after this request took one; X-RateLimit-Reset is 0, since a slot
// comes back when a request ends, which no one can foresee, and a 429's
// Retry-After is 1 second. The IETF fields say the same (q Max, r the
// free slots, t 0, or 1 on a 429, the Retry-After), with w Expiration. A
// body streamed after the handler returns (SetBodyStreamWriter) runs
// after the slot is back. Skip*Requests, MaxFunc, Cost,
// IdempotencyKey, Limits, Burst, Lease, BlockFor and MinInterval mean
// nothing for slots: New panics if they are set.
//
//	app.Post("/export", limiter.New(limiter.Config{
//		Max:               2,
//		Expiration:        10 * time.Minute,
//		LimiterMiddleware: limiter.Concurrency{},
//	}), export)
type Concurrency struct{}

// New returns the handler that caps the requests in flight per key.
func (Concurrency) New(cfg Config) fiber.Handler {
	return buildHandler(cfg, adapter.Settings{Concurrency: true})
}
