package limiter

// ExpirationFunc: a window chosen per request, in memory and on Redis.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v3"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ExpirationFunc sets each request's window, in memory and on Redis: a
// client on a 2 s window gets its quota back after it, while one on an
// hour's stays spent, and each window keeps its own count. The clock is
// the test's; Redis drops keys by its own, a key's TTL being its window
// or more, so the windows are long enough for a loaded machine.
func TestExpirationFunc(t *testing.T) {
	server := redistest.Start(t)
	backends := map[string]func() fiber.Storage{
		"memory": func() fiber.Storage { return nil },
		"redis": func() fiber.Storage {
			storage := fiberredis.New(fiberredis.Config{Addrs: []string{server.Addr()}})
			t.Cleanup(func() { _ = storage.Close() })
			return storage
		},
	}
	for name, storage := range backends {
		for _, alg := range algorithms {
			t.Run(name+"/"+alg.name, func(t *testing.T) {
				now := time.Now().UnixMilli()
				var clock atomic.Int64
				clock.Store(now)
				cfg := Config{
					Max: 2, Expiration: time.Hour, LimiterMiddleware: alg.mw, Name: alg.name,
					ExpirationFunc: func(c fiber.Ctx) time.Duration {
						if c.Get("X-Key") == "fast" {
							return 2 * time.Second
						}
						return time.Hour
					},
					clock: clock.Load,
				}
				if s := storage(); s != nil {
					cfg.Storage = s
				}
				h := replica(strict(cfg))
				for _, key := range []string{"fast", "slow"} {
					for range 2 {
						code, _ := serve(h, key)
						require.Equal(t, fiber.StatusOK, code, key)
					}
					code, _ := serve(h, key)
					require.Equal(t, fiber.StatusTooManyRequests, code, key)
				}
				clock.Add(5000) // two fast windows, a fraction of the slow one
				code, remaining := serve(h, "fast")
				assert.Equal(t, fiber.StatusOK, code, "fast: its window has passed")
				assert.Equal(t, "1", remaining)
				code, _ = serve(h, "slow")
				assert.Equal(t, fiber.StatusTooManyRequests, code, "slow: within its hour")
			})
		}
	}
}
