// Command quickstart serves one route, 100 requests a minute per client.
package main

import (
	"log"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
)

func main() {
	log.Fatal(newApp().Listen(":3000"))
}

func newApp() *fiber.App {
	app := fiber.New()

	// 100 requests per minute per client IP, fixed window, in memory.
	app.Use(limiter.New(limiter.Config{
		Max:        100,
		Expiration: time.Minute,
	}))

	app.Get("/", func(c *fiber.Ctx) error {
		return c.SendString("hello")
	})
	return app
}
