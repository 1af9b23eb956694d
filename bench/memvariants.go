package main

import (
	"strconv"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"
)

// memVariant is one in-memory limiter as Fiber middleware: mw returns a
// fresh one admitting max requests per minute per key, or nil for the
// baseline (no limiter).
type memVariant struct {
	name string
	mw   func(max int) fiber.Handler
	// app, when set instead of mw, is the whole app (a Fiber v3 one), and
	// base the baseline its added cost is measured over.
	app  func(max int) fasthttp.RequestHandler
	base string
}

// handler is the variant's app for a limit of max.
func (v memVariant) handler(max int) fasthttp.RequestHandler {
	if v.app != nil {
		return v.app(max)
	}
	var mw fiber.Handler
	if v.mw != nil {
		mw = v.mw(max)
	}
	return newApp(mw)
}

// baseline is the variant its added cost is over.
func (v memVariant) baseline() string {
	if v.base != "" {
		return v.base
	}
	return vBaseline
}

// Names of the in-memory variants.
const (
	vBaseline     = "baseline (no limiter)"
	vOursFixed    = "ours-fixed"
	vOursSliding  = "ours-sliding"
	vOursToken    = "ours-token"
	vFiberFixed   = "fiber-fixed"
	vFiberSliding = "fiber-sliding"
	vUluleMem     = "ulule-memory"
	vFloor        = "floor (key + 3 headers, no limiting)"
)

// oursMemory is this limiter in memory with algorithm alg. The token
// bucket gets a capacity (Burst) of max and refills at max/10^6 (at least
// 1) per minute: a bucket that is full again between two requests holds no
// state and is reclaimed, so with a refill as fast as the limit (10^9 per
// minute) every request would re-create its key's entry, which is not what
// a limited key costs.
func oursMemory(alg limiter.LimiterHandler) func(int) fiber.Handler {
	return func(limit int) fiber.Handler {
		cfg := limiter.Config{Max: limit, Expiration: time.Minute, KeyGenerator: headerKey, LimiterMiddleware: alg}
		if _, ok := alg.(limiter.TokenBucket); ok {
			cfg.Max, cfg.Burst = max(1, limit/1_000_000), limit
		}
		return limiter.New(cfg)
	}
}

// fiberMemory is Fiber's middleware/limiter with its memory store and
// algorithm alg.
func fiberMemory(alg fiberlimiter.LimiterHandler) func(int) fiber.Handler {
	return func(max int) fiber.Handler {
		return fiberlimiter.New(fiberlimiter.Config{Max: max, Expiration: time.Minute, KeyGenerator: headerKey, LimiterMiddleware: alg})
	}
}

// ululeMemoryLimiter is ulule/limiter with its memory store, max per
// minute.
func ululeMemoryLimiter(max int) *ulule.Limiter {
	store := ululememory.NewStoreWithOptions(ulule.StoreOptions{Prefix: "ulule", CleanUpInterval: time.Minute})
	return ulule.New(store, ulule.Rate{Period: time.Minute, Limit: int64(max)})
}

// ululeMiddleware adapts an ulule limiter to Fiber, which ulule has no
// middleware for, the way ulule's own fasthttp middleware works: it takes
// one unit for the key, sets the three X-RateLimit headers and answers 429
// once the limit is reached.
func ululeMiddleware(lim *ulule.Limiter) fiber.Handler {
	return func(c *fiber.Ctx) error {
		res, err := lim.Get(c.UserContext(), c.Get(keyHeader))
		if err != nil {
			return err
		}
		c.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
		c.Set("X-RateLimit-Remaining", strconv.FormatInt(res.Remaining, 10))
		c.Set("X-RateLimit-Reset", strconv.FormatInt(res.Reset, 10))
		if res.Reached {
			return c.SendStatus(fiber.StatusTooManyRequests)
		}
		return c.Next()
	}
}

// floorMiddleware is not a limiter: it is what a plain Fiber middleware
// that limits by a key and reports X-RateLimit-Limit, -Remaining and -Reset
// does per request besides limiting. It reads the key, writes the three
// headers (names already in fasthttp's normal form, so SetCanonical skips
// normalizing; values formatted per request into a stack buffer) and calls
// the next handler. Its added cost as a share of a peer's is row
// "floor / ..." of figure 1b. Our limiter sets the values it knows (its
// Max, numbers below 10,000) from text made once, which costs less than
// formatting them, so what it adds above the floor is its own work less
// that saving.
func floorMiddleware() fiber.Handler {
	limit, remaining, reset := []byte("X-Ratelimit-Limit"), []byte("X-Ratelimit-Remaining"), []byte("X-Ratelimit-Reset")
	return func(c *fiber.Ctx) error {
		var buf [20]byte
		key := headerKey(c)
		h := &c.Response().Header
		h.SetCanonical(limit, strconv.AppendInt(buf[:0], memMax, 10))
		h.SetCanonical(remaining, strconv.AppendInt(buf[:0], memMax-1-int64(len(key)&1), 10))
		h.SetCanonical(reset, strconv.AppendInt(buf[:0], 60, 10))
		return c.Next()
	}
}

// memVariants are the in-memory variants, the baseline first.
func memVariants() []memVariant {
	return append([]memVariant{
		{name: vBaseline},
		{name: vOursFixed, mw: oursMemory(limiter.FixedWindow{})},
		{name: vOursSliding, mw: oursMemory(limiter.SlidingWindow{})},
		{name: vOursToken, mw: oursMemory(limiter.TokenBucket{})},
		{name: vFiberFixed, mw: fiberMemory(fiberlimiter.FixedWindow{})},
		{name: vFiberSliding, mw: fiberMemory(fiberlimiter.SlidingWindow{})},
		{name: vUluleMem, mw: func(max int) fiber.Handler { return ululeMiddleware(ululeMemoryLimiter(max)) }},
		{name: vFloor, mw: func(int) fiber.Handler { return floorMiddleware() }},
	}, v3Variants()...)
}

// memPairs are the comparisons of the in-memory figures: ours, then the
// peer with the same algorithm; last, the floor against Fiber's limiter.
var memPairs = [][2]string{
	{vOursFixed, vFiberFixed},
	{vOursSliding, vFiberSliding},
	{vOursFixed, vUluleMem},
	{vFloor, vFiberFixed},
	{vV3OursFixed, vV3FiberFixed},
	{vV3OursFixed, vOursFixed},
}
