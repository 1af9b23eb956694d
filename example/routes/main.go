// Command routes limits logins by address and username and an API by key,
// in Redis when REDIS_URL is set.
package main

import (
	"log"
	"os"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/storage/redis/v3"
)

func main() {
	var storage fiber.Storage // nil: in this process's memory
	if url := os.Getenv("REDIS_URL"); url != "" {
		storage = redis.New(redis.Config{URL: url})
	}
	log.Fatal(newApp(storage).Listen(":3000"))
}

func newApp(storage fiber.Storage) *fiber.App {
	app := fiber.New()

	// Logins: 5 attempts per 15 minutes for each username from each
	// address, never more in any 15 minutes (a sliding log).
	app.Post("/login", limiter.New(limiter.Config{
		Name:              "login",
		Max:               5,
		Expiration:        15 * time.Minute,
		LimiterMiddleware: limiter.SlidingLog{},
		Storage:           storage,
		KeyGenerator: func(c *fiber.Ctx) string {
			return c.IP() + "|" + c.FormValue("username")
		},
	}), func(c *fiber.Ctx) error {
		return c.SendString("welcome")
	})

	// The API: each key may burst 20 requests and then 10 a second.
	// Requests without a key are limited by address instead.
	api := app.Group("/api", limiter.New(limiter.Config{
		Name:              "api",
		Max:               10,
		Expiration:        time.Second,
		Burst:             20,
		LimiterMiddleware: limiter.TokenBucket{},
		Storage:           storage,
		KeyGenerator: func(c *fiber.Ctx) string {
			if key := c.Get("X-API-Key"); key != "" {
				return "key:" + key
			}
			return "ip:" + c.IP()
		},
	}))
	api.Get("/items", func(c *fiber.Ctx) error {
		return c.SendString("items")
	})
	return app
}
