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
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/internal/appflag"
	"github.com/fiberlimit/limiter/internal/fasthttpfields"
	rlheaders "github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// LimiterHandler chooses the algorithm: FixedWindow, SlidingWindow,
// TokenBucket or SlidingLog. New receives the config with defaults filled in and returns
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

// handler is the one middleware body shared by every algorithm and backend.
type handler struct {
	next         func(*fiber.Ctx) bool
	maxFunc      func(*fiber.Ctx) int
	onceFunc     func(*fiber.Ctx) string // IdempotencyKey
	costFunc     func(*fiber.Ctx) int
	keyFunc      func(*fiber.Ctx) string
	limitReached fiber.Handler
	engine       *quota.Limiter
	memory       bool // the engine keeps state in memory
	refunds      bool // SkipFailedRequests or SkipSuccessfulRequests
	skipFailed   bool
	skipOK       bool
	headers      *rlheaders.Writer
	dryRun       bool
	onDecision   func(*fiber.Ctx, DecisionEvent)
	// normalizing: whether each app served keeps header names as given
	normalizing appflag.Flag[fiber.App]
}

// newHandler builds the middleware for alg. cfg may come straight from a
// user calling FixedWindow{}.New(cfg), so the defaults are applied again.
func newHandler(cfg Config, alg quota.Algorithm) fiber.Handler {
	cfg = configDefault(cfg)
	engine, w := newEngine(&cfg, alg)
	h := &handler{
		next:         cfg.Next,
		maxFunc:      cfg.MaxFunc,
		onceFunc:     cfg.IdempotencyKey,
		costFunc:     cfg.Cost,
		keyFunc:      cfg.KeyGenerator,
		limitReached: cfg.LimitReached,
		engine:       engine,
		refunds:      cfg.SkipFailedRequests || cfg.SkipSuccessfulRequests,
		skipFailed:   cfg.SkipFailedRequests,
		skipOK:       cfg.SkipSuccessfulRequests,
		headers:      w,
		dryRun:       cfg.DryRun,
		onDecision:   cfg.OnDecision,
	}
	h.memory = h.engine.Backend() == "memory"
	if bits := cfg.IPv6Prefix; isDefaultKeyGenerator(cfg.KeyGenerator) && bits != defaultIPv6Prefix {
		h.keyFunc = func(c *fiber.Ctx) string { return ipKey(c.IP(), bits) }
	}
	// The raw-bytes IP key saves formatting the address, but is no text to
	// show in a header or hand to a hook, nor a key to share with other
	// replicas.
	if h.memory && isDefaultKeyGenerator(cfg.KeyGenerator) && cfg.OnDecision == nil && !cfg.HeaderPartitionKey {
		h.keyFunc = (&ipKeyer{bits: cfg.IPv6Prefix}).key
	}
	return h.serve
}

func (h *handler) serve(c *fiber.Ctx) error {
	if h.next != nil && h.next(c) {
		return c.Next()
	}
	max := 0
	if h.maxFunc != nil {
		if max = h.maxFunc(c); max <= 0 {
			return c.Next()
		}
	}
	cost := 1
	if h.costFunc != nil {
		if cost = h.costFunc(c); cost < 0 {
			return fmt.Errorf("limiter: Cost returned %d for %s %s; it must be >= 0", cost, c.Method(), c.Path())
		}
	}
	key := h.keyFunc(c)
	if h.refunds || h.headers.WithKey() {
		// The key may point into request buffers that the handler below
		// is free to change (proxy.Forward does); the refund and the pk
		// of the headers written after it need it as it is now.
		key = string([]byte(key))
	}
	var start time.Time
	if h.onDecision != nil {
		start = time.Now()
	}
	// The in-memory engine reads the request's own start time from
	// fasthttp's context, sparing a clock read; a store call runs under the
	// application's context.
	var ctx context.Context = c.Context()
	if !h.memory {
		ctx = c.UserContext()
	}
	var res quota.Result
	var err error
	var id string // the request's IdempotencyKey
	switch {
	case max > 0:
		res, err = h.engine.TakeWith(ctx, key, cost, quota.Limit{Max: max})
	case h.onceFunc != nil:
		id = h.onceFunc(c)
		if h.refunds {
			id = string([]byte(id)) // for RefundOnce, after the handler
		}
		res, err = h.engine.TakeOnce(ctx, key, id, cost)
	default:
		err = h.engine.TakeInto(ctx, key, cost, &res)
	}
	if err != nil {
		return fmt.Errorf("limiter: rate-limit storage failed: %w", err)
	}
	if h.onDecision != nil {
		h.report(c, key, cost, &res, start)
	}
	switch res.Source() {
	case quota.SourceFailOpen:
		return c.Next()
	case quota.SourceFailClosed:
		if h.dryRun {
			return c.Next()
		}
		var buf [20]byte
		h.foldNames(c)
		value := rlheaders.RetryAfterValue(buf[:0], res.RetryAfter())
		if front := rlheaders.ExhaustedInFront(fieldsOf(c), nil); front > int64(res.RetryAfter()/time.Second) {
			value = strconv.AppendInt(buf[:0], front, 10)
		}
		c.Response().Header.SetCanonical(rlheaders.NameRetryAfter, value)
		c.Context().SetUserValue(rejectedBehind{}, true)
		return c.SendStatus(fiber.StatusServiceUnavailable)
	}
	if !res.Allowed() && !h.dryRun {
		h.foldNames(c)
		out := rlheaders.AcquireOut()
		h.headers.Write(out, fieldsOf(c), &res, key, false)
		fasthttpfields.Set(&c.Response().Header, out)
		c.Context().SetUserValue(rejectedBehind{}, true)
		return h.limitReached(c)
	}
	err = c.Next()
	if res.Allowed() && h.refunds && cost != 0 {
		if failed := responseStatus(c, err) >= fiber.StatusBadRequest; (failed && h.skipFailed) || (!failed && h.skipOK) {
			if after, refundErr := h.engine.RefundOnce(h.refundContext(c), key, id, cost, &res); refundErr == nil {
				res = after
			}
		}
	}
	h.foldNames(c)
	rejected := c.Context().UserValue(rejectedBehind{}) != nil
	if limit, remaining, reset, ok := h.headers.Plain(&res); ok && !rejected {
		fasthttpfields.SetPlain(&c.Response().Header, h.headers, limit, remaining, reset)
		return err
	}
	out := rlheaders.AcquireOut()
	h.headers.WriteAdmitted(out, fieldsOf(c), &res, key, h.dryRun, rejected)
	fasthttpfields.Set(&c.Response().Header, out)
	return err
}

// refundContext is the context a refund runs under: the request's own in
// memory, else the application's.
func (h *handler) refundContext(c *fiber.Ctx) context.Context {
	if h.memory {
		return c.Context()
	}
	return c.UserContext()
}

// report calls OnDecision with the result res on key, taken since start:
// the event describes the most restrictive limit.
func (h *handler) report(c *fiber.Ctx, key string, cost int, res *quota.Result, start time.Time) {
	i := res.TightestIndex()
	d := res.Decisions()[i]
	h.onDecision(c, DecisionEvent{
		Key:        key,
		Allowed:    d.Allowed,
		DryRun:     h.dryRun,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Cost:       cost,
		RetryAfter: res.RetryAfter(),
		Expiration: h.engine.Expiration(res, i),
		Algorithm:  h.engine.Algorithm().String(),
		Backend:    h.engine.Backend(),
		Source:     res.Source(),
		Latency:    time.Since(start),
	})
}

// responseStatus is the status the client will get: a returned error decides
// it (a *fiber.Error its code, anything else 500), as Fiber's default error
// handler does, since that handler has not run yet.
func responseStatus(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// foldNames gives the rate-limit fields of c's response the names the
// limiter reads and sets, when c's app does not normalize header names
// (see fasthttpfields.Fold); with normalized names it does nothing.
func (h *handler) foldNames(c *fiber.Ctx) {
	if h.normalizing.Of(c.App(), namesAsGiven) {
		fasthttpfields.Fold(&c.Response().Header, h.headers)
	}
}

// namesAsGiven reports whether app keeps header names as they are given
// (DisableHeaderNormalizing).
func namesAsGiven(app *fiber.App) bool { return app.Config().DisableHeaderNormalizing }
