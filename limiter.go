// Package limiter is a rate-limiting middleware for Fiber v2. Its Config is
// Fiber's middleware/limiter config, so a Fiber config compiles unchanged,
// and it adds a token bucket and an exact sliding log beside the fixed and
// sliding windows, several limits per request, millisecond time, and
// rate-limit headers on every response it decides.
//
// State lives in this process by default: a sharded in-memory manager,
// bounded in keys, that allocates nothing per request. Set Config.Storage
// to a Redis storage (the *Storage of github.com/gofiber/storage/redis/v3,
// or a Store of this module's storage/redis) and the limiter finds the
// go-redis client behind it: every decision is then one atomic Lua script
// call in Redis, so any number of replicas admit exactly the limit between
// them, on one Redis or a Redis Cluster. Any other fiber.Storage is exact
// within one process only. Config.FailurePolicy says what happens while
// Redis is out of reach.
//
// Several limits, such as 10 per second and 1000 per hour, are decided as
// one (Config.Limits), and several limiters share a Storage without
// touching each other's state (Config.Name).
//
//	app.Use(limiter.New(limiter.Config{
//		Max:               100,
//		Expiration:        time.Minute,
//		LimiterMiddleware: limiter.TokenBucket{},
//	}))
//
// The same engine serves Fiber v3 (github.com/fiberlimit/limiter/fiberv3),
// net/http (github.com/fiberlimit/limiter/nethttp) and any Go program
// (github.com/fiberlimit/limiter/quota).
package limiter

import (
	"fmt"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/internal/fiberpath"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// LimiterHandler chooses the algorithm: FixedWindow, SlidingWindow,
// TokenBucket or SlidingLog, or Concurrency, a cap on the requests in
// flight. New receives the config with defaults filled in and returns
// the middleware. It is Fiber's interface, so a user's own implementation
// still plugs in.
type LimiterHandler interface {
	New(config Config) fiber.Handler
}

// New returns the rate-limiting middleware for config (ConfigDefault when
// none is given). It panics if the config is invalid, naming the field.
func New(config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	h := cfg.LimiterMiddleware.New(cfg)
	if h == nil {
		panic(fmt.Sprintf("limiter: LimiterMiddleware %T returned a nil handler from New", cfg.LimiterMiddleware))
	}
	return h
}

// newHandler builds the middleware for alg. cfg may come straight from a
// user calling FixedWindow{}.New(cfg), so the defaults are applied again.
func newHandler(cfg Config, alg quota.Algorithm) fiber.Handler {
	return buildHandler(cfg, adapter.Settings{Algorithm: alg})
}

// buildHandler builds the middleware of s (an algorithm, or Concurrency)
// for cfg, whose defaults it applies again.
func buildHandler(cfg Config, s adapter.Settings) fiber.Handler {
	h, _ := build(cfg, s, false)
	return h
}

// build is buildHandler, and it returns the middleware's path. With
// operated (NewLimiter), the default KeyGenerator's keys are the client's
// address as text, the keys an operator names.
func build(cfg Config, s adapter.Settings, operated bool) (fiber.Handler, *adapter.Path) {
	cfg = configDefault(cfg)
	h := &fiberpath.Handler[*fiber.Ctx]{
		Path:           newPath(&cfg, s),
		Framework:      framework(),
		Skip:           cfg.Next,
		IdempotencyKey: cfg.IdempotencyKey,
		Cost:           cfg.Cost,
		KeyGenerator:   cfg.KeyGenerator,
		LimitReached:   cfg.LimitReached,
		OnDecision:     cfg.OnDecision,
	}
	if cfg.MaxFunc != nil {
		h.MaxFunc = cfg.MaxFunc
	}
	if bits := cfg.IPv6Prefix; isDefaultKeyGenerator(cfg.KeyGenerator) && bits != defaultIPv6Prefix {
		h.KeyGenerator = func(c *fiber.Ctx) string { return ipKey(c.IP(), bits) }
	}
	// The raw-bytes IP key saves formatting the address, but is no text to
	// show in a header or hand to a hook, nor a key to share with other
	// replicas.
	if h.Memory && isDefaultKeyGenerator(cfg.KeyGenerator) && cfg.OnDecision == nil && !cfg.HeaderPartitionKey && !operated {
		h.KeyGenerator = (&ipKeyer{bits: cfg.IPv6Prefix}).key
	}
	return h.Serve, h.Path
}

// framework is what the request path of one limiter needs of Fiber v2.
func framework() fiberpath.Framework[*fiber.Ctx] {
	return fiberpath.Framework[*fiber.Ctx]{
		RequestCtx:   (*fiber.Ctx).Context,
		AppContext:   (*fiber.Ctx).UserContext,
		Next:         (*fiber.Ctx).Next,
		SendStatus:   (*fiber.Ctx).SendStatus,
		ErrorStatus:  fiberpath.ErrorStatus(func(e *fiber.Error) int { return e.Code }),
		NamesAsGiven: fiberpath.NamesAsGiven((*fiber.Ctx).App, func(app *fiber.App) bool { return app.Config().DisableHeaderNormalizing }),
	}
}
