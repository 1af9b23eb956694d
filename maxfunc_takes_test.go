package limiter

import (
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

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

func spendPlan(hs []fasthttp.RequestHandler, key, plan string, n int) int {
	admitted := 0
	for i := range n {
		if code, _ := hostileSend(hs[i%len(hs)], key, "X-Plan", plan); code == fiber.StatusOK {
			admitted++
		}
	}
	return admitted
}

// a take under a small plan clamps the previous window's count
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

// with BlockFor, a rejection under a small plan blocks the key
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

// the same clamp in a rolling deploy that lowers Max, no MaxFunc:
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
