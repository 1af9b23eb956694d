// Package limiter is a rate-limiting middleware for Fiber v3, configured
// like Fiber v3's own middleware/limiter (a Fiber v3 config compiles after
// changing only the import path), with a fixed window, a sliding window,
// a token bucket and an exact sliding log, several limits per request,
// millisecond time, and rate-limit headers on every response it decides.
//
// State lives in this process by default. Given a Redis Storage (the
// *Storage of github.com/gofiber/storage/redis/v3, or a Store of
// github.com/fiberlimit/limiter/storage/redis), the limiter finds the
// go-redis client behind it and makes every decision one atomic Lua script
// call in Redis, so any number of replicas admit exactly the limit between
// them, on one Redis or a Redis Cluster. Any other fiber.Storage is exact
// within one process only. It decides with the same engine, and the same decisions, as
// the Fiber v2 middleware github.com/fiberlimit/limiter and the net/http
// one, github.com/fiberlimit/limiter/nethttp.
//
//	app.Use(limiter.New(limiter.Config{
//		Max:               100,
//		Expiration:        time.Minute,
//		LimiterMiddleware: limiter.TokenBucket{},
//	}))
package limiter

import (
	"fmt"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/fiberlimit/limiter/internal/fiberpath"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// Handler chooses the algorithm: FixedWindow, SlidingWindow, TokenBucket
// or SlidingLog, or Concurrency, a cap on the requests in flight. It is Fiber v3's interface, so a user's own implementation
// still plugs in.
type Handler interface {
	New(config *Config) fiber.Handler
}

// New returns the rate-limiting middleware for config (ConfigDefault when
// none is given). It panics if the config is invalid, naming the field.
func New(config ...Config) fiber.Handler {
	cfg := configDefault(config...)
	h := cfg.LimiterMiddleware.New(&cfg)
	if h == nil {
		panic(fmt.Sprintf("limiter: LimiterMiddleware %T returned a nil handler from New", cfg.LimiterMiddleware))
	}
	return h
}

// newHandler builds the middleware for alg. config may come straight from
// a user calling FixedWindow{}.New, so the defaults are applied again.
func newHandler(config *Config, alg quota.Algorithm) fiber.Handler {
	return buildHandler(config, adapter.Settings{Algorithm: alg})
}

// buildHandler builds the middleware of s (an algorithm, or Concurrency)
// for config, whose defaults it applies again.
func buildHandler(config *Config, s adapter.Settings) fiber.Handler {
	h, _ := build(config, s)
	return h
}

// build is buildHandler, and it returns the middleware's path.
func build(config *Config, s adapter.Settings) (fiber.Handler, *adapter.Path) {
	var cfg Config
	if config == nil {
		cfg = configDefault()
	} else {
		cfg = configDefault(*config)
	}
	// A MaxFunc or ExpirationFunc that stands for the field is not called:
	// the field is the limit.
	if standsForMax(cfg.MaxFunc) {
		cfg.MaxFunc = nil
	}
	if standsForExpiration(cfg.ExpirationFunc) {
		cfg.ExpirationFunc = nil
	}
	s.MaxFunc = cfg.MaxFunc != nil
	s.ExpirationFunc = cfg.ExpirationFunc != nil
	s.IdempotencyKey = cfg.IdempotencyKey != nil
	s.Cost = cfg.Cost != nil
	s.Clock = cfg.clock
	path := adapter.MustBuild(&cfg, s)
	path.FailError, path.ShowKeys = cfg.FailurePolicy == FailError, cfg.DisableValueRedaction
	h := &fiberpath.Handler[fiber.Ctx]{
		Path:           path,
		Framework:      framework(),
		Skip:           cfg.Next,
		MaxFunc:        cfg.MaxFunc,
		ExpirationFunc: cfg.ExpirationFunc,
		IdempotencyKey: cfg.IdempotencyKey,
		Cost:           cfg.Cost,
		KeyGenerator:   cfg.KeyGenerator,
		LimitReached:   cfg.LimitReached,
		OnDecision:     cfg.OnDecision,
	}
	if bits := cfg.IPv6Prefix; isDefaultKeyGenerator(cfg.KeyGenerator) && bits != 0 && bits != clientaddr.DefaultIPv6Prefix {
		h.KeyGenerator = func(c fiber.Ctx) string { return clientaddr.Key(c.IP(), bits) }
	}
	return h.Serve, path
}

// framework is what the request path of one limiter needs of Fiber v3.
func framework() fiberpath.Framework[fiber.Ctx] {
	return fiberpath.Framework[fiber.Ctx]{
		RequestCtx:   fiber.Ctx.RequestCtx,
		AppContext:   fiber.Ctx.Context,
		Next:         fiber.Ctx.Next,
		SendStatus:   fiber.Ctx.SendStatus,
		ErrorStatus:  fiberpath.ErrorStatus(func(e *fiber.Error) int { return e.Code }),
		NamesAsGiven: fiberpath.NamesAsGiven(fiber.Ctx.App, func(app *fiber.App) bool { return app.Config().DisableHeaderNormalizing }),
	}
}
