package main

import (
	"strconv"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
)

// appConfig is what one replica's app is built from.
type appConfig struct {
	// replica is the replica's number, from 1, sent in X-Replica.
	replica int
	// storage keeps the limiters' state; nil keeps it in this replica's
	// memory.
	storage fiber.Storage
	// demo is the limit of GET /demo.
	demo demoConfig
	// storageTimeout, when not 0, replaces the limiters' StorageTimeout
	// (100 ms); the command sets it from -storage-timeout.
	storageTimeout time.Duration
	// onStorageError, when set, is told of storage failures.
	onStorageError func(error)
}

// newApp builds one replica's app: the routes and their limiters, each
// limiter its own instance keeping its state in cfg.storage.
func newApp(cfg appConfig) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})

	// Every response, a 429 or a 404 too, names the replica that served it.
	replica := strconv.Itoa(cfg.replica)
	app.Use(func(c *fiber.Ctx) error {
		c.Set("X-Replica", replica)
		return c.Next()
	})

	// A fixed window of 5 requests per 10 seconds for each client IP. Each
	// limiter has a Name of its own, so that their states in a shared
	// Storage never mix.
	app.Get("/", cfg.limit(limiter.Config{
		Name:       "root",
		Max:        5,
		Expiration: 10 * time.Second,
	}), func(c *fiber.Ctx) error {
		return c.SendString("hello\n")
	})

	// One token bucket per client IP, shared by every /api route because the
	// routes share this one handler: it holds 6 tokens and refills 1 per
	// second. Cost runs inside the matched route, so c.Route().Path names it.
	apiLimit := cfg.limit(limiter.Config{
		Name:              "api",
		Max:               1,
		Expiration:        time.Second,
		Burst:             6,
		LimiterMiddleware: limiter.TokenBucket{},
		Cost: func(c *fiber.Ctx) int {
			if c.Route().Path == "/api/expensive" {
				return 3
			}
			return 1
		},
	})
	api := app.Group("/api")
	api.Get("/cheap", apiLimit, func(c *fiber.Ctx) error {
		return c.SendString("cheap: 1 token\n")
	})
	api.Get("/expensive", apiLimit, func(c *fiber.Ctx) error {
		return c.SendString("expensive: 3 tokens\n")
	})

	// One quota for every client (see demoConfig), so that the load
	// generator can show exact totals across replicas.
	app.Get("/demo", cfg.limit(cfg.demo.config()), func(c *fiber.Ctx) error {
		return c.SendString("demo: admitted by replica " + replica + "\n")
	})
	return app
}

// limit returns a limiter for lc, keeping its state where cfg says.
func (cfg appConfig) limit(lc limiter.Config) fiber.Handler {
	lc.Storage = cfg.storage
	lc.StorageTimeout = cfg.storageTimeout
	lc.OnStorageError = cfg.onStorageError
	return limiter.New(lc)
}
