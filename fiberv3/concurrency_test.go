package limiter

import (
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/stretchr/testify/assert"
)

// Concurrency in Fiber v3: Max 2, five requests at once held until all
// are decided: 2 run, 3 get 429; a panicking handler frees its slot.
func TestConcurrencyCapsRequestsInFlight(t *testing.T) {
	var decided sync.WaitGroup
	decided.Add(5)
	release := make(chan struct{})
	app := fiber.New()
	app.Use(New(Config{Max: 2, Expiration: time.Minute, LimiterMiddleware: Concurrency{},
		KeyGenerator: func(c fiber.Ctx) string { return c.Get("X-Key") },
		OnDecision:   func(fiber.Ctx, DecisionEvent) { decided.Done() },
	}))
	app.Get("/*", func(c fiber.Ctx) error {
		<-release
		return c.SendStatus(fiber.StatusOK)
	})
	h := app.Handler()
	codes := make(chan int, 5)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			code, _ := serve(h, "k")
			codes <- code
		})
	}
	decided.Wait()
	close(release)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{fiber.StatusOK: 2, fiber.StatusTooManyRequests: 3}, count)
	assert.Panics(t, func() { New(Config{LimiterMiddleware: Concurrency{}, SkipFailedRequests: true}) })
	assert.Panics(t, func() {
		New(Config{MaxDelay: time.Second, ExpirationFunc: func(fiber.Ctx) time.Duration { return time.Second }})
	})
}
