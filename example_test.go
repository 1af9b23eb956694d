package limiter_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	fiberredis "github.com/gofiber/storage/redis/v3"
)

// send makes n GET requests to app and prints each status with the named
// response headers.
func send(app *fiber.App, n int, path string, headers ...string) {
	for range n {
		resp, err := app.Test(httptest.NewRequest("GET", path, nil), -1)
		if err != nil {
			panic(err)
		}
		_ = resp.Body.Close()
		line := []string{strconv.Itoa(resp.StatusCode)}
		for _, h := range headers {
			if v := resp.Header.Get(h); v != "" {
				line = append(line, h+": "+v)
			}
		}
		fmt.Println(strings.Join(line, " | "))
	}
}

func ok(c *fiber.Ctx) error { return c.SendString("ok") }

// A fixed window, the default: Max requests per Expiration for each client
// IP. The third request in the minute is rejected with 429 and
// Retry-After; rejected requests are not counted.
func ExampleNew() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:        2,
		Expiration: time.Minute,
	}))
	app.Get("/", ok)

	send(app, 3, "/", "X-Ratelimit-Remaining", "Retry-After")
	// Output:
	// 200 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Remaining: 0 | Retry-After: 60
}

// FixedWindow, named explicitly, with a key of the caller's choosing: each
// API key gets Max requests per window, counted from its first request, and
// one client's spent quota leaves another's alone. X-Ratelimit-Reset is the
// seconds until the window ends and the quota is back.
func ExampleFixedWindow() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:               2,
		Expiration:        30 * time.Second,
		KeyGenerator:      func(c *fiber.Ctx) string { return c.Get("X-API-Key") },
		LimiterMiddleware: limiter.FixedWindow{},
	}))
	app.Get("/", ok)

	for _, apiKey := range []string{"alice", "alice", "alice", "bob"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", apiKey)
		resp, err := app.Test(req, -1)
		if err != nil {
			panic(err)
		}
		_ = resp.Body.Close()
		fmt.Println(apiKey, resp.StatusCode, "remaining", resp.Header.Get("X-Ratelimit-Remaining"), "reset", resp.Header.Get("X-Ratelimit-Reset"))
	}
	// Output:
	// alice 200 remaining 1 reset 30
	// alice 200 remaining 0 reset 30
	// alice 429 remaining 0 reset 30
	// bob 200 remaining 1 reset 30
}

// The sliding window weighs the previous window's count by how much of it
// still overlaps the last Expiration, so a client cannot send 2×Max across
// a window boundary.
func ExampleSlidingWindow() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:               3,
		Expiration:        10 * time.Second,
		LimiterMiddleware: limiter.SlidingWindow{},
	}))
	app.Get("/", ok)

	send(app, 4, "/", "X-Ratelimit-Remaining")
	// Output:
	// 200 | X-Ratelimit-Remaining: 2
	// 200 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Remaining: 0
}

// A token bucket refills Max tokens per Expiration, evenly, into a bucket
// of Burst tokens: here a burst of 5, then one request every 2 seconds. The
// rejected request may retry after 2 seconds, when the next token is in.
func ExampleTokenBucket() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:               30,
		Expiration:        time.Minute,
		Burst:             5,
		LimiterMiddleware: limiter.TokenBucket{},
	}))
	app.Get("/", ok)

	send(app, 6, "/", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "Retry-After")
	// Output:
	// 200 | X-Ratelimit-Limit: 5 | X-Ratelimit-Remaining: 4
	// 200 | X-Ratelimit-Limit: 5 | X-Ratelimit-Remaining: 3
	// 200 | X-Ratelimit-Limit: 5 | X-Ratelimit-Remaining: 2
	// 200 | X-Ratelimit-Limit: 5 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Limit: 5 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Limit: 5 | X-Ratelimit-Remaining: 0 | Retry-After: 2
}

// SlidingLog keeps the time of every admitted request, so no minute ever
// sees more than Max: a fourth login within the minute of the first waits
// until the first leaves it.
func ExampleSlidingLog() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:               3,
		Expiration:        time.Minute,
		LimiterMiddleware: limiter.SlidingLog{},
	}))
	app.Get("/login", ok)

	send(app, 4, "/login", "X-Ratelimit-Remaining", "Retry-After")
	// Output:
	// 200 | X-Ratelimit-Remaining: 2
	// 200 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Remaining: 0 | Retry-After: 60
}

// Limits shared by every replica through Redis: a Storage from
// github.com/gofiber/storage/redis/v3 is used through its go-redis client,
// with one atomic script call per decision, so any number of replicas
// admit exactly Max between them.
func Example_redis() {
	// A prefix of this run's own, so that a rerun starts afresh.
	prefix := "example:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	// Two replicas, as two processes would be, each with its own client.
	var replicas []*fiber.App
	for range 2 {
		// In production, for example: fiberredis.Config{URL: "redis://redis:6379/0"}.
		// Here, the redis-server the tests started.
		storage := fiberredis.New(fiberredis.Config{URL: "redis://" + os.Getenv("LIMITER_EXAMPLE_REDIS")})
		defer func() { _ = storage.Close() }()
		app := fiber.New()
		app.Use(limiter.New(limiter.Config{
			Name:       "api", // replicas share by running the same config; in one process, by the same Name
			Max:        3,
			Expiration: time.Minute,
			Storage:    storage,
			KeyPrefix:  prefix,
		}))
		app.Get("/", ok)
		replicas = append(replicas, app)
	}
	// Requests alternate between the replicas; 3 are admitted in all.
	for i := range 5 {
		send(replicas[i%2], 1, "/", "X-Ratelimit-Remaining")
	}
	// Output:
	// 200 | X-Ratelimit-Remaining: 2
	// 200 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Remaining: 0
}

// MaxFunc sets the limit per request, here from the client's plan; a
// result of 0 or less lets the request through unlimited.
func ExampleConfig_maxFunc() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Expiration: time.Minute,
		MaxFunc: func(c *fiber.Ctx) int {
			switch c.Query("plan") {
			case "pro":
				return 1000
			case "internal":
				return 0 // unlimited
			}
			return 10
		},
		KeyGenerator: func(c *fiber.Ctx) string { return c.Query("plan") },
	}))
	app.Get("/", ok)

	send(app, 1, "/?plan=free", "X-Ratelimit-Limit")
	send(app, 1, "/?plan=pro", "X-Ratelimit-Limit")
	send(app, 1, "/?plan=internal", "X-Ratelimit-Limit")
	// Output:
	// 200 | X-Ratelimit-Limit: 10
	// 200 | X-Ratelimit-Limit: 1000
	// 200
}

// Cost makes some requests take more of the quota: an export costs 5 of
// the 10 units a minute. After a read and an export, 4 units remain: a
// second export does not fit (and, rejected, takes nothing), a read does.
func ExampleConfig_cost() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:        10,
		Expiration: time.Minute,
		Cost: func(c *fiber.Ctx) int {
			if strings.HasPrefix(c.Path(), "/export") {
				return 5
			}
			return 1
		},
	}))
	app.Get("/*", ok)

	send(app, 1, "/read", "X-Ratelimit-Remaining")
	send(app, 2, "/export", "X-Ratelimit-Remaining")
	send(app, 1, "/read", "X-Ratelimit-Remaining")
	// Output:
	// 200 | X-Ratelimit-Remaining: 9
	// 200 | X-Ratelimit-Remaining: 4
	// 429 | X-Ratelimit-Remaining: 4
	// 200 | X-Ratelimit-Remaining: 3
}

// downStorage is a fiber.Storage that always fails, as an unreachable
// database would.
type downStorage struct{}

var errDown = errors.New("connection refused")

func (downStorage) Get(string) ([]byte, error)              { return nil, errDown }
func (downStorage) Set(string, []byte, time.Duration) error { return errDown }
func (downStorage) Delete(string) error                     { return errDown }
func (downStorage) Reset() error                            { return errDown }
func (downStorage) Close() error                            { return nil }

// FailurePolicy says what happens while Storage fails: FailFallback (the
// default) limits each replica in its own memory with the same rule,
// FailOpen lets requests through, and FailClosed answers 503 with
// Retry-After. No storage error reaches the client, and OnStorageError
// hears about the failures.
func ExampleFailurePolicy() {
	for _, policy := range []limiter.FailurePolicy{limiter.FailFallback, limiter.FailOpen, limiter.FailClosed} {
		app := fiber.New()
		app.Use(limiter.New(limiter.Config{
			Max:            2,
			Expiration:     time.Minute,
			Storage:        downStorage{},
			FailurePolicy:  policy,
			StorageTimeout: time.Second, // so that a loaded machine does not turn the error into a timeout
			OnStorageError: func(err error) {
				var se *limiter.StorageError
				if errors.As(err, &se) && se.Failures == 1 {
					fmt.Println("storage failing:", errors.Is(err, errDown))
				}
			},
		}))
		app.Get("/", ok)
		fmt.Println(policy)
		send(app, 3, "/", "X-Ratelimit-Remaining", "Retry-After")
	}
	// Output:
	// FailFallback
	// storage failing: true
	// 200 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Remaining: 0
	// 429 | X-Ratelimit-Remaining: 0 | Retry-After: 60
	// FailOpen
	// storage failing: true
	// 200
	// 200
	// 200
	// FailClosed
	// storage failing: true
	// 503 | Retry-After: 1
	// 503 | Retry-After: 1
	// 503 | Retry-After: 1
}

// The IETF fields of draft-ietf-httpapi-ratelimit-headers-10 instead of
// (or with, HeadersBoth) the X-RateLimit ones. On a rejection, Retry-After
// equals t.
func ExampleHeaderMode() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:        2,
		Expiration: time.Minute,
		Headers:    limiter.HeadersIETF,
		PolicyName: "api",
	}))
	app.Get("/", ok)

	send(app, 3, "/", "RateLimit-Policy", "RateLimit", "Retry-After")
	// Output:
	// 200 | RateLimit-Policy: "api";q=2;w=60 | RateLimit: "api";r=1;t=60
	// 200 | RateLimit-Policy: "api";q=2;w=60 | RateLimit: "api";r=0;t=60
	// 429 | RateLimit-Policy: "api";q=2;w=60 | RateLimit: "api";r=0;t=60 | Retry-After: 60
}

// DryRun with OnDecision: measure a new limit in production before
// enforcing it. Every request goes through; the hook sees which ones the
// limit would have rejected.
func ExampleConfig_dryRun() {
	wouldReject := 0
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Max:        2,
		Expiration: time.Minute,
		DryRun:     true,
		OnDecision: func(c *fiber.Ctx, e limiter.DecisionEvent) {
			if !e.Allowed {
				wouldReject++ // in real code: a metric, labelled by e.Algorithm, e.Backend, e.Source
			}
		},
	}))
	app.Get("/", ok)

	send(app, 4, "/", "X-Ratelimit-Remaining")
	fmt.Println("would have rejected:", wouldReject)
	// Output:
	// 200 | X-Ratelimit-Remaining: 1
	// 200 | X-Ratelimit-Remaining: 0
	// 200 | X-Ratelimit-Remaining: 0
	// 200 | X-Ratelimit-Remaining: 0
	// would have rejected: 2
}

// Several limits decided as one: 2 per 10 seconds and 3 per hour. The
// third request is rejected by the first limit and counts in neither; the
// headers describe the most restrictive limit, and the IETF fields list
// both.
func ExampleConfig_limits() {
	app := fiber.New()
	app.Use(limiter.New(limiter.Config{
		Limits: []limiter.Limit{
			{Max: 2, Expiration: 10 * time.Second},
			{Max: 3, Expiration: time.Hour},
		},
		Headers: limiter.HeadersBoth,
	}))
	app.Get("/", ok)

	send(app, 3, "/", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "RateLimit")
	// Output:
	// 200 | X-Ratelimit-Limit: 2 | X-Ratelimit-Remaining: 1 | RateLimit: "default-10s";r=1;t=10, "default-1h";r=2;t=3600
	// 200 | X-Ratelimit-Limit: 2 | X-Ratelimit-Remaining: 0 | RateLimit: "default-10s";r=0;t=10, "default-1h";r=1;t=3600
	// 429 | X-Ratelimit-Limit: 2 | X-Ratelimit-Remaining: 0 | RateLimit: "default-10s";r=0;t=10, "default-1h";r=1;t=3600
}

// Limiters per route, each with a Name: on a shared Storage their states
// never mix (a Name is how New tells two limiters of the same algorithm
// and window apart), and in memory each has its own anyway.
func ExampleConfig_name() {
	app := fiber.New()
	app.Get("/login", limiter.New(limiter.Config{Name: "login", Max: 1, Expiration: 15 * time.Minute}), ok)
	app.Get("/search", limiter.New(limiter.Config{Name: "search", Max: 2, Expiration: time.Minute}), ok)

	send(app, 2, "/login")
	send(app, 2, "/search")
	// Output:
	// 200
	// 429
	// 200
	// 200
}
