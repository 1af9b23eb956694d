package limiter

// A Max that changes between requests (MaxFunc plans, a deploy lowering it): takes, blocks, refunds.

import (
	"strconv"
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

// planConfig is a strict config whose MaxFunc reads the plan (the Max) from
// X-Plan, on clock, changed by f when f is not nil.
func planConfig(alg LimiterHandler, clock *testClock, f func(*Config)) Config {
	cfg := strict(Config{
		Name: "rt-clamp", Expiration: 100 * time.Second, LimiterMiddleware: alg,
		MaxFunc: func(c *fiber.Ctx) int {
			n, _ := strconv.Atoi(c.Get("X-Plan"))
			return n
		},
		DisableDenyCache: true,
	})
	cfg.clock = clock.millis
	if f != nil {
		f(&cfg)
	}
	return cfg
}

// spendPlan sends n requests of plan for key, spread over hs, and returns
// how many were admitted.
func spendPlan(hs []fasthttp.RequestHandler, key, plan string, n int) int {
	admitted := 0
	for i := range n {
		if code, _ := hostileSend(hs[i%len(hs)], key, "X-Plan", plan); code == fiber.StatusOK {
			admitted++
		}
	}
	return admitted
}

// A take under a small plan clamps the previous window's count
// of a sliding window down to its own limit (plausible / the Lua clamp)
// and, when it admits, writes the clamped count back. Plan 1000 spends
// 1000 in one window; 10 s (0.1 window) into the next it has 100 left.
// One request of plan 10 is admitted there (its clamped estimate is 9)
// and lowers the stored previous count from 1000 to 10: plan 1000 then
// gets 990 instead of 100.
func TestSlidingWindowSmallPlanClampsPrev(t *testing.T) {
	srv := redistest.Start(t)
	for _, b := range hostileBackends {
		t.Run(b.name, func(t *testing.T) {
			var clock testClock
			clock.now.Store(1_800_000_000_000)
			hs := hostileReplicas(t, b, srv, newMapStorage(), nil, planConfig(SlidingWindow{}, &clock, nil))
			key := t.Name()
			first := spendPlan(hs, key, "1000", 1000)
			clock.advance(110 * time.Second) // 10 s into the next window
			small := spendPlan(hs, key, "10", 1)
			then := spendPlan(hs, key, "1000", 1200)
			t.Logf("%s: plan 1000 %d, then plan 10 %d, then plan 1000 %d (at most %d: 1000 - 0.9*1000 - %d)", b.name, first, small, then, 100-small, small)
			assert.Equal(t, 1000, first)
			assert.LessOrEqual(t, then, 100-small, "the previous window's 1000 still weigh 900")
		})
	}
}

// With BlockFor, a rejection under a small plan blocks the key
// and writes its states back as plausible read them: a count of 1000
// (plan 1000) clamped to 10 (plan 10). Once the block has passed, plan
// 1000 gets 990 more in the same window. In memory and on a Storage (the
// Lua twin writes the value as it was read, and holds).
func TestBlockWritesClampedCount(t *testing.T) {
	srv := redistest.Start(t)
	for _, b := range hostileBackends {
		for _, alg := range algorithms[:3] {
			t.Run(b.name+"/"+alg.name, func(t *testing.T) {
				var clock testClock
				clock.now.Store(1_800_000_000_000)
				hs := hostileReplicas(t, b, srv, newMapStorage(), nil, planConfig(alg.mw, &clock, func(c *Config) {
					c.BlockFor = time.Millisecond
				}))
				key := t.Name()
				first := spendPlan(hs, key, "1000", 1000)
				small := spendPlan(hs, key, "10", 1)
				clock.advance(2 * time.Millisecond) // past the block
				then := spendPlan(hs, key, "1000", 1200)
				t.Logf("%s %s: plan 1000 %d, plan 10 %d (blocks), plan 1000 after the block %d (want 0)", b.name, alg.name, first, small, then)
				assert.Equal(t, 1000, first)
				assert.Equal(t, 0, then, "the window holds 1000 already")
			})
		}
	}
}

// The same clamp in a rolling deploy that lowers Max, no MaxFunc:
// old replicas {Max: 1000}, new {Max: 10}, sliding window of 100 s. The
// old ones spend 1000; 10 s into the next window one request to a new
// replica is admitted and writes the previous count as 10; the old
// replicas then admit 990 where 100 were left.
func TestDeploySlidingWindowMaxLowered(t *testing.T) {
	srv := redistest.Start(t)
	for _, b := range hostileBackends[1:] {
		t.Run(b.name, func(t *testing.T) {
			var clock testClock
			clock.now.Store(1_800_000_000_000)
			shared := newMapStorage()
			mk := func(max int) Config {
				cfg := strict(Config{Name: "rt-deploy-sw", Max: max, Expiration: 100 * time.Second, LimiterMiddleware: SlidingWindow{}, DisableDenyCache: true})
				cfg.clock = clock.millis
				return cfg
			}
			old := hostileReplicas(t, hostileBackend{b.name, 2}, srv, shared, nil, mk(1000))
			neu := hostileReplicas(t, hostileBackend{b.name, 1}, srv, shared, nil, mk(10))
			key := t.Name()
			first := spendPlan(old, key, "", 1000)
			clock.advance(110 * time.Second)
			small := spendPlan(neu, key, "", 1)
			then := spendPlan(old, key, "", 1200)
			t.Logf("%s: old %d, new %d, old after %d (at most %d)", b.name, first, small, then, 100-small)
			assert.LessOrEqual(t, then, 100-small)
		})
	}
}

// A refund gives back what its request took and nothing more, whatever the
// refunded request's MaxFunc said: a request of plan 400 is admitted and
// held in its handler, requests of plan 1000 spend the key meanwhile, and
// when the held one is given back, exactly one more of plan 1000 fits.
// Three replicas, in memory (one replica: memory is per process), on Redis
// and on a Storage of get and set; both Skip*Requests; every algorithm
// that takes a MaxFunc.
func TestRefundUnderAnotherMaxFunc(t *testing.T) {
	server := redistest.Start(t)
	backends := []struct {
		name     string
		replicas int
		storage  func() fiber.Storage
	}{
		{"memory", 1, func() fiber.Storage { return nil }},
		{"redis", 3, func() fiber.Storage {
			return redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr()}))
		}},
		{"storage", 3, nil}, // one map storage, shared
	}
	modes := []struct {
		name          string
		skipFailed    bool
		held, counted string // paths: the held request's, and the others'
	}{
		{"SkipFailedRequests", true, "/fail", "/"},
		{"SkipSuccessfulRequests", false, "/", "/fail"},
	}
	const plan = 1000
	for _, b := range backends {
		for _, m := range modes {
			for _, alg := range algorithms[:3] { // SlidingLog refuses MaxFunc at New
				t.Run(b.name+"/"+m.name+"/"+alg.name, func(t *testing.T) {
					shared := newMapStorage()
					// A clock that stands still: the token bucket refills
					// nothing meanwhile, and its 500 s window in ms divides
					// by both plans, so that its refund is exact to the unit.
					var clock testClock
					clock.now.Store(1_800_000_000_000)
					key := t.Name()
					entered, release := make(chan struct{}), make(chan struct{})
					var replicas []fasthttp.RequestHandler
					for range b.replicas {
						cfg := strict(Config{
							Name: "refund-" + b.name, Expiration: 500 * time.Second, LimiterMiddleware: alg.mw,
							KeyGenerator: headerKey,
							MaxFunc: func(c *fiber.Ctx) int {
								n, _ := strconv.Atoi(c.Get("X-Plan"))
								return n
							},
							SkipFailedRequests: m.skipFailed, SkipSuccessfulRequests: !m.skipFailed,
						})
						cfg.clock = clock.millis
						if b.storage == nil {
							cfg.Storage = shared
						} else if s := b.storage(); s != nil {
							t.Cleanup(func() { _ = s.Close() })
							cfg.Storage = s
						}
						app := fiber.New(fiber.Config{DisableStartupMessage: true})
						app.Use(New(cfg))
						app.Get("/*", func(c *fiber.Ctx) error {
							if c.Get("X-Hold") != "" {
								entered <- struct{}{}
								<-release
							}
							if c.Path() == "/fail" {
								return c.SendStatus(fiber.StatusInternalServerError)
							}
							return c.SendStatus(fiber.StatusOK)
						})
						replicas = append(replicas, app.Handler())
					}
					send := func(i int, path, plan string, hold bool) (int, string) {
						var ctx fasthttp.RequestCtx
						ctx.Request.Header.SetMethod(fasthttp.MethodGet)
						ctx.Request.SetRequestURI(path)
						ctx.Request.Header.Set("X-Key", key)
						ctx.Request.Header.Set("X-Plan", plan)
						if hold {
							ctx.Request.Header.Set("X-Hold", "1")
						}
						replicas[i%len(replicas)](&ctx)
						return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("X-Ratelimit-Remaining"))
					}
					spend := func() int {
						admitted := 0
						for i := range plan {
							if code, _ := send(i, m.counted, strconv.Itoa(plan), false); code != fiber.StatusTooManyRequests {
								admitted++
							}
						}
						return admitted
					}

					heldRemaining := make(chan string, 1)
					go func() {
						_, remaining := send(0, m.held, "400", true)
						heldRemaining <- remaining
					}()
					select {
					case <-entered:
					case <-heldRemaining:
						require.Fail(t, "the held request was not admitted")
					}
					require.Equal(t, plan-1, spend(), "the held request takes one unit")
					close(release)
					remaining := <-heldRemaining
					assert.Equal(t, 1, spend(), "the refund gives back its one unit, no more")
					assert.Equal(t, "0", remaining, "under its own plan of 400, the key is spent after the refund too")
				})
			}
		}
	}
}
