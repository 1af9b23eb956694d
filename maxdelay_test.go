package limiter

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// A burst of requests at once on three replicas of one Redis, each with
// its own client, under MaxDelay: the requests whose turn comes within
// MaxDelay wait for it and are served, each no sooner than its turn; the
// others get 429 at once. The token bucket (10 a second, Burst 1, MaxDelay
// 1.95 s, 25 at once) serves 20, the k-th after k x 100 ms; the fixed
// window (5 a second, MaxDelay 1.5 s, 12 at once) serves 5 now and 5 when
// the next window opens. The replicas decide on one frozen clock, so the
// 25 requests are "at once" however the machine schedules them.
func TestMaxDelayWaitsForTheTurnAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name     string
		cfg      Config
		requests int
		turns    []time.Duration // each served request's turn, sorted
	}{
		{"token bucket", Config{Max: 10, Expiration: time.Second, Burst: 1, LimiterMiddleware: TokenBucket{}, MaxDelay: 1950 * time.Millisecond}, 25,
			[]time.Duration{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800, 1900}},
		{"fixed window", Config{Max: 5, Expiration: time.Second, MaxDelay: 1500 * time.Millisecond}, 12,
			[]time.Duration{0, 0, 0, 0, 0, 1000, 1000, 1000, 1000, 1000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := &testClock{}
			clock.now.Store(time.Now().UnixMilli())
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr()}))
				t.Cleanup(func() { _ = storage.Close() })
				cfg := strict(c.cfg)
				cfg.Storage, cfg.clock, cfg.Name = storage, clock.millis, "waits-"+strconv.Itoa(len(c.turns))
				replicas = append(replicas, replicaHandler(cfg))
			}
			start := time.Now()
			var mu sync.Mutex
			var served, rejected []time.Duration
			var wg sync.WaitGroup
			for i := range c.requests {
				wg.Go(func() {
					code, _ := serveKeyed(replicas[i%3], "client")
					took := time.Since(start)
					mu.Lock()
					defer mu.Unlock()
					switch code {
					case fiber.StatusOK:
						served = append(served, took)
					case fiber.StatusTooManyRequests:
						rejected = append(rejected, took)
					default:
						t.Errorf("status %d", code)
					}
				})
			}
			wg.Wait()
			slices.Sort(served)
			require.Len(t, served, len(c.turns), "served")
			assert.Len(t, rejected, c.requests-len(c.turns), "rejected")
			for k, at := range served {
				assert.GreaterOrEqual(t, at, c.turns[k]*time.Millisecond, "the %d-th served no sooner than its turn", k)
			}
		})
	}
}

// A request that waited for its turn carries the headers of its turn: the
// fixed window's next window, with Max-1 remaining after it.
func TestMaxDelayHeadersShowTheTurn(t *testing.T) {
	clock := &testClock{}
	clock.now.Store(time.Now().UnixMilli())
	app := newApp(Config{Max: 2, Expiration: time.Second, MaxDelay: 1500 * time.Millisecond, KeyGenerator: headerKey}, clock, nil)
	for range 2 {
		resp := get(t, app, "/", "k")
		require.Equal(t, fiber.StatusOK, resp.StatusCode)
	}
	start := time.Now()
	resp := get(t, app, "/", "k")
	require.Equal(t, fiber.StatusOK, resp.StatusCode)
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "it waited for the next window")
	assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Remaining"), "the next window, with this request counted")
	assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Limit"))
	resp = get(t, app, "/", "k")
	require.Equal(t, fiber.StatusOK, resp.StatusCode)
	resp = get(t, app, "/", "k")
	assert.Equal(t, fiber.StatusTooManyRequests, resp.StatusCode, "the window after it lies beyond MaxDelay")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
}

// MaxDelay with what a turn cannot hold panics at New, naming the fields.
func TestMaxDelayPanicsWithWhatItCannotHold(t *testing.T) {
	for name, cfg := range map[string]Config{
		"MaxFunc":        {MaxDelay: time.Second, MaxFunc: func(*fiber.Ctx) int { return 5 }},
		"IdempotencyKey": {MaxDelay: time.Second, IdempotencyKey: func(*fiber.Ctx) string { return "" }},
		"Lease":          {MaxDelay: time.Second, Lease: time.Second},
		"BlockFor":       {MaxDelay: time.Second, BlockFor: time.Minute},
		"MinInterval":    {MaxDelay: time.Second, MinInterval: time.Second},
		"negative":       {MaxDelay: -time.Second},
		"too long":       {MaxDelay: 2 * time.Minute, Expiration: time.Second},
		"MaxWaiting":     {MaxDelay: time.Second, MaxWaiting: -1},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				p := recover()
				require.NotNil(t, p, "New must panic")
				field := "MaxDelay"
				if name == "MaxWaiting" {
					field = name
				}
				assert.Contains(t, p, field)
			}()
			New(cfg)
		})
	}
}

// A request that may wait, in memory, served by the app's handler with no
// fasthttp server around it (as tests and benchmarks serve it), waits
// for its turn without touching the server fasthttp's Done would need.
func TestMaxDelayInMemoryWithoutAServer(t *testing.T) {
	clock := &testClock{}
	clock.now.Store(time.Now().UnixMilli())
	cfg := Config{Max: 1, Expiration: 100 * time.Millisecond, MaxDelay: time.Second, KeyGenerator: headerKey}
	cfg.clock = clock.millis
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(cfg))
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	h := app.Handler()
	for range 3 {
		code, _ := serveKeyed(h, "k")
		assert.Equal(t, fiber.StatusOK, code)
	}
	concurrent := New(Config{Max: 1, MaxDelay: time.Second, LimiterMiddleware: Concurrency{}, KeyGenerator: headerKey})
	app = fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(concurrent)
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	code, _ := serveKeyed(app.Handler(), "k")
	assert.Equal(t, fiber.StatusOK, code)
}

// On a Redis Cluster of 3 masters, turns and slots hold across replicas as
// on one Redis, for keys on every master: each key's burst of 12 at once
// (fixed window, 5 a second, MaxDelay 1.5 s, one frozen clock) gives 10
// served and 2 rejected, and Concurrency Max 2 never admits a third
// request of a key while two are held.
func TestMaxDelayAndConcurrencyOnACluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	clock := &testClock{}
	clock.now.Store(time.Now().UnixMilli())
	var turns, slots []fasthttp.RequestHandler
	release, entered := make(chan struct{}), make(chan struct{}, 12)
	for range 3 {
		storage := redis.New(cluster.Client(t))
		cfg := strict(Config{Max: 5, Expiration: time.Second, MaxDelay: 1500 * time.Millisecond, Storage: storage, Name: "cluster-turns"})
		cfg.clock = clock.millis
		turns = append(turns, replicaHandler(cfg))
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(New(Config{Max: 2, Expiration: time.Minute, Storage: storage, Name: "cluster-slots", LimiterMiddleware: Concurrency{},
			KeyGenerator: headerKey, FailurePolicy: FailClosed, StorageTimeout: 10 * time.Second}))
		app.Get("/hold", func(c *fiber.Ctx) error {
			entered <- struct{}{}
			<-release
			return c.SendStatus(fiber.StatusOK)
		})
		app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		slots = append(slots, app.Handler())
	}
	var wg sync.WaitGroup
	for k := range 6 { // keys over every master
		key := "k" + strconv.Itoa(k)
		wg.Go(func() {
			var served, rejected atomic.Int64
			var each sync.WaitGroup
			for i := range 12 {
				each.Go(func() {
					switch code, _ := serveKeyed(turns[i%3], key); code {
					case fiber.StatusOK:
						served.Add(1)
					case fiber.StatusTooManyRequests:
						rejected.Add(1)
					default:
						t.Errorf("status %d", code)
					}
				})
			}
			each.Wait()
			assert.Equal(t, int64(10), served.Load(), "key %s", key)
			assert.Equal(t, int64(2), rejected.Load(), "key %s", key)
		})
	}
	wg.Wait()
	serve := func(h fasthttp.RequestHandler, path, key string) int {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.Set("X-Key", key)
		h(&ctx)
		return ctx.Response.StatusCode()
	}
	var held sync.WaitGroup
	defer held.Wait()
	defer close(release)
	for k := range 6 {
		key := "s" + strconv.Itoa(k)
		for i := range 2 {
			held.Go(func() { serve(slots[i%3], "/hold", key) })
		}
		<-entered
		<-entered // both hold their slots
		assert.Equal(t, fiber.StatusTooManyRequests, serve(slots[2], "/", key), "two held, a third of %s is refused", key)
		assert.Equal(t, fiber.StatusTooManyRequests, serve(slots[1], "/", key), "still two held of %s", key)
	}
}
