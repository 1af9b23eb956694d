package limiter

// Limiters sharing one Storage: each keeps its own state, and New refuses two whose identities clash.

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	fiberredis "github.com/gofiber/storage/redis/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stackedApp serves GET /* behind the given limiters in a row, on clock.
func stackedApp(clock *testClock, cfgs ...Config) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	for _, cfg := range cfgs {
		cfg.clock = clock.millis
		app.Use(New(cfg))
	}
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendString("ok") })
	return app
}

// Two limiters in a row, 3 per second in front of 10 per hour, on one
// Storage: a client sending 5 requests every 1.1 s for 20 s is admitted as
// often on Redis as in memory, for each algorithm. Each limiter's state is
// its own: the 1 s limiter never resets the hourly one's count (with a
// shared key, Redis admitted 36), and the bucket of one is never read in
// the other's units.
func TestStackedLimitersKeepTheirOwnState(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			admitted := map[string]int{}
			for _, b := range limitBackends() {
				clock := &testClock{}
				store := b.config(t, Config{}).Storage
				burst := Config{Max: 3, Expiration: time.Second, Storage: store, LimiterMiddleware: alg.mw, KeyGenerator: headerKey}
				hourly := Config{Max: 10, Expiration: time.Hour, Storage: store, LimiterMiddleware: alg.mw, KeyGenerator: headerKey}
				app := stackedApp(clock, burst, hourly)
				for range 19 { // 19 rounds of 1.1 s: 20.9 s
					for range 5 {
						resp := get(t, app, "/", "client")
						require.Contains(t, []int{200, 429}, resp.StatusCode)
						if resp.StatusCode == 200 {
							admitted[b.name]++
						}
					}
					clock.advance(1100 * time.Millisecond)
				}
			}
			assert.Equal(t, admitted["memory"], admitted["redis"], "admitted in memory and on Redis")
			assert.LessOrEqual(t, admitted["redis"], 10, "the hourly limit holds")
			assert.GreaterOrEqual(t, admitted["redis"], 9, "and the client gets about its hour's worth")
		})
	}
}

// Per-route limiters on one Redis with default settings: /login 5 per
// 15 s and /search 100 per second, token buckets keyed by the client IP.
// A client calling /search once and /login 5 times every 1.1 s gets as
// many logins on Redis as in memory, within the login rule: a full bucket
// of 5 and one more every 3 s (it got 52 when the two shared a key).
func TestPerRouteLimitersOnOneRedis(t *testing.T) {
	logins := map[string]int{}
	for _, b := range limitBackends() {
		clock := &testClock{}
		store := b.config(t, Config{}).Storage
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		login := New(Config{Max: 5, Expiration: 15 * time.Second, Storage: store, LimiterMiddleware: TokenBucket{}, clock: clock.millis})
		search := New(Config{Max: 100, Expiration: time.Second, Storage: store, LimiterMiddleware: TokenBucket{}, clock: clock.millis})
		app.Get("/login", login, func(c *fiber.Ctx) error { return c.SendString("welcome") })
		app.Get("/search", search, func(c *fiber.Ctx) error { return c.SendString("found") })
		for range 13 { // 13 rounds of 1.1 s: 14.3 s
			require.Equal(t, 200, get(t, app, "/search", "").StatusCode)
			for range 5 {
				if resp := get(t, app, "/login", ""); resp.StatusCode == 200 {
					logins[b.name]++
				}
			}
			clock.advance(1100 * time.Millisecond)
		}
	}
	// 5 at once, then one every 3 s over 13.2 s: at 3.3, 6.6, 9.9 and 13.2 s.
	assert.Equal(t, 9, logins["memory"])
	assert.Equal(t, logins["memory"], logins["redis"])
}

// Two limiters of one process with the same algorithm and window on the
// same Storage would read each other's state: New refuses the second,
// saying how to separate them. The same Storage is the same Redis (server
// and database), through any client or storage. Different windows,
// different algorithms, different Names, or another Redis are accepted,
// and so are two limiters that ask to share with the same Name (as
// replicas do).
func TestIdentityClashes(t *testing.T) {
	client := redistest.Start(t).Client(t)
	store := redis.New(client)
	sameClient := redis.New(client) // another Storage over the same client
	first := New(Config{Max: 5, Expiration: time.Minute, Storage: store})
	addr := client.Options().Addr
	otherClient := goredis.NewClient(&goredis.Options{Addr: addr})
	otherDB := goredis.NewClient(&goredis.Options{Addr: addr, DB: 1})
	gofiber := fiberredis.New(fiberredis.Config{Addrs: []string{addr}})
	t.Cleanup(func() { _, _, _ = otherClient.Close(), otherDB.Close(), gofiber.Close() })
	msg := "limiter: another limiter of this process keeps its state in the same Storage under \"limiter::fw:1m:\""
	for _, tt := range []struct {
		name  string
		cfg   Config
		clash bool
	}{
		{"same rule", Config{Max: 5, Expiration: time.Minute, Storage: store}, true},
		{"another Max", Config{Max: 100, Expiration: time.Minute, Storage: store}, true},
		{"a Storage over the same client", Config{Max: 5, Expiration: time.Minute, Storage: sameClient}, true},
		{"another client of the same Redis", Config{Max: 5, Expiration: time.Minute, Storage: redis.New(otherClient)}, true},
		{"gofiber's storage on the same Redis", Config{Max: 5, Expiration: time.Minute, Storage: gofiber}, true},
		{"another database of the same Redis", Config{Max: 5, Expiration: time.Minute, Storage: redis.New(otherDB)}, false},
		{"another window", Config{Max: 5, Expiration: time.Hour, Storage: store}, false},
		{"another algorithm", Config{Max: 5, Expiration: time.Minute, Storage: store, LimiterMiddleware: SlidingWindow{}}, false},
		{"a Name", Config{Max: 5, Expiration: time.Minute, Storage: store, Name: "login"}, false},
		{"another Redis", Config{Max: 5, Expiration: time.Minute, Storage: redis.New(redistest.Start(t).Client(t))}, false},
		{"Limits with the same window", Config{Limits: []Limit{{Max: 5, Expiration: time.Minute}}, Storage: store}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.clash {
				assert.PanicsWithValue(t, msg+" (the same algorithm and Expiration, and no Name); give each limiter its own Name (Config.Name, say the route: \"login\"), or the same Name to both if they are to share one count",
					func() { New(tt.cfg) })
			} else {
				assert.NotPanics(t, func() { New(tt.cfg) })
			}
		})
	}
	t.Run("the same Name shares", func(t *testing.T) {
		a := newApp(Config{Max: 2, Expiration: time.Minute, Storage: store, Name: "shared", KeyGenerator: headerKey}, nil, nil)
		b := newApp(Config{Max: 2, Expiration: time.Minute, Storage: store, Name: "shared", KeyGenerator: headerKey}, nil, nil)
		assert.Equal(t, 200, get(t, a, "/", "k").StatusCode)
		assert.Equal(t, 200, get(t, b, "/", "k").StatusCode)
		assert.Equal(t, 429, get(t, a, "/", "k").StatusCode, "one count for both")
	})
	t.Run("a limiter that is gone frees its identity", func(t *testing.T) {
		other := redis.New(client)
		func() { New(Config{Max: 5, Expiration: 2 * time.Minute, Storage: other}) }()
		assert.NotPanics(t, func() { New(Config{Max: 5, Expiration: 2 * time.Minute, Storage: other}) })
	})
	runtime.KeepAlive(first)
}

// Two routes with the same rule and a Name each keep apart on Redis, as
// they are in memory.
func TestNamedLimitersKeepApart(t *testing.T) {
	client := redistest.Start(t).Client(t)
	store := redis.New(client)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	for _, route := range []string{"/a", "/b"} {
		app.Get(route, New(Config{Name: strings.TrimPrefix(route, "/"), Max: 2, Expiration: time.Minute, Storage: store}),
			func(c *fiber.Ctx) error { return c.SendString("ok") })
	}
	for _, route := range []string{"/a", "/a", "/b", "/b"} {
		assert.Equal(t, 200, get(t, app, route, "").StatusCode, route)
	}
	assert.Equal(t, 429, get(t, app, "/a", "").StatusCode)
	assert.ElementsMatch(t, []string{"limiter:a:fw:1m:0.0.0.0", "limiter:b:fw:1m:0.0.0.0"}, storedKeys(t, client, "*"))
}
