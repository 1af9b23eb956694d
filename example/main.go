// Command example is a small Fiber app rate-limited by
// github.com/fiberlimit/limiter, with the in-memory store by default or a
// Redis shared by every replica.
//
// Run it from the repository root and follow the curl commands it prints:
//
//	go run ./example                     # serves http://127.0.0.1:3000
//	go run ./example -addr 127.0.0.1:8080
//	go run ./example -redis redis://127.0.0.1:6379/0
//
// Routes:
//
//	GET /               fixed window: 5 requests per 10 seconds per client IP
//	GET /api/cheap      token bucket: burst of 6, refills 1 token per second; cost 1
//	GET /api/expensive  the same bucket; cost 3
//
// Stop it with Ctrl+C (SIGINT) or SIGTERM; in-flight requests finish first.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "address to listen on")
	redisURL := flag.String("redis", "", "Redis URL (redis://host:port/db) to share limits between replicas; default: in memory")
	flag.Parse()

	var storage fiber.Storage // nil: the in-memory manager
	if *redisURL != "" {
		opts, err := goredis.ParseURL(*redisURL)
		if err != nil {
			fmt.Fprintln(os.Stderr, "example: -redis:", err)
			os.Exit(2)
		}
		store := redis.New(goredis.NewClient(opts))
		defer store.Close()
		storage = store
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	printUsage(os.Stdout, baseURL(ln.Addr()), storage != nil)

	app := newApp(storage)
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-errc: // the server stopped on its own
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	fmt.Println("shutting down")
	if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "example: shutdown:", err)
		os.Exit(1)
	}
	<-errc
}

// newApp builds the app: the routes and their limiters, keeping their state
// in storage (nil: in this process's memory).
func newApp(storage fiber.Storage) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})

	// A fixed window of 5 requests per 10 seconds for each client IP.
	app.Get("/", limiter.New(limiter.Config{
		Max:        5,
		Expiration: 10 * time.Second,
		Storage:    storage,
	}), func(c *fiber.Ctx) error {
		return c.SendString("hello\n")
	})

	// One token bucket per client IP, shared by every /api route because the
	// routes share this one handler: it holds 6 tokens and refills 1 per
	// second. Cost runs inside the matched route, so c.Route().Path names it.
	apiLimit := limiter.New(limiter.Config{
		Max:               1,
		Expiration:        time.Second,
		Burst:             6,
		LimiterMiddleware: limiter.TokenBucket{},
		Storage:           storage,
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
	return app
}

// baseURL is the URL to reach a listener at, with a loopback host when it
// listens on every interface.
func baseURL(a net.Addr) string {
	host, port, _ := net.SplitHostPort(a.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func printUsage(w io.Writer, base string, shared bool) {
	where := "in-memory limiter"
	if shared {
		where = "limits shared through Redis"
	}
	fmt.Fprintf(w, `Serving on %[1]s (%[2]s; Ctrl+C to stop)
  GET /               fixed window: 5 requests per 10s per client IP
  GET /api/cheap      token bucket: burst 6, refills 1 token/s, costs 1
  GET /api/expensive  the same bucket, costs 3

Try (the 6th request to / gets 429 with Retry-After):
  for i in 1 2 3 4 5 6; do curl -si %[1]s/ | grep -iE '^(HTTP|X-RateLimit|Retry-After)'; echo; done
  for i in 1 2 3; do curl -si %[1]s/api/expensive | grep -iE '^(HTTP|X-RateLimit|Retry-After)'; echo; done
`, base, where)
}
