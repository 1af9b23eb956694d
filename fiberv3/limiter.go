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
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/internal/appflag"
	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/fiberlimit/limiter/internal/fasthttpfields"
	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
)

// Handler chooses the algorithm: FixedWindow, SlidingWindow, TokenBucket
// or SlidingLog. It is Fiber v3's interface, so a user's own implementation
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

// handler is the one middleware body shared by every algorithm and backend.
type handler struct {
	next           func(fiber.Ctx) bool
	maxFunc        func(fiber.Ctx) int
	onceFunc       func(fiber.Ctx) string // IdempotencyKey
	expirationFunc func(fiber.Ctx) time.Duration
	costFunc       func(fiber.Ctx) int
	keyFunc        func(fiber.Ctx) string
	limitReached   fiber.Handler
	engine         *quota.Limiter
	memory         bool // the engine keeps state in memory
	refunds        bool // SkipFailedRequests or SkipSuccessfulRequests
	skipFailed     bool
	skipOK         bool
	headers        *headers.Writer
	dryRun         bool
	onDecision     func(fiber.Ctx, DecisionEvent)
	// normalizing: whether each app served keeps header names as given
	normalizing appflag.Flag[fiber.App]
}

// newHandler builds the middleware for alg. config may come straight from
// a user calling FixedWindow{}.New, so the defaults are applied again.
func newHandler(config *Config, alg quota.Algorithm) fiber.Handler {
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
	s := adapter.Settings{
		Algorithm:      alg,
		MaxFunc:        cfg.MaxFunc != nil,
		ExpirationFunc: cfg.ExpirationFunc != nil,
		IdempotencyKey: cfg.IdempotencyKey != nil,
		Clock:          cfg.clock,
	}
	s.CopyFrom(&cfg)

	if cfg.Storage != nil {
		s.Storage = cfg.Storage
	}
	for _, l := range cfg.Limits {
		s.Limits = append(s.Limits, adapter.Limit(l))
	}
	engine, w, err := s.Build()
	if err != nil {
		panic(err.Error())
	}
	h := &handler{
		next:           cfg.Next,
		maxFunc:        cfg.MaxFunc,
		onceFunc:       cfg.IdempotencyKey,
		expirationFunc: cfg.ExpirationFunc,
		costFunc:       cfg.Cost,
		keyFunc:        cfg.KeyGenerator,
		limitReached:   cfg.LimitReached,
		engine:         engine,
		memory:         engine.Backend() == "memory",
		refunds:        cfg.SkipFailedRequests || cfg.SkipSuccessfulRequests,
		skipFailed:     cfg.SkipFailedRequests,
		skipOK:         cfg.SkipSuccessfulRequests,
		headers:        w,
		dryRun:         cfg.DryRun,
		onDecision:     cfg.OnDecision,
	}
	if bits := cfg.IPv6Prefix; isDefaultKeyGenerator(cfg.KeyGenerator) && bits != 0 && bits != clientaddr.DefaultIPv6Prefix {
		h.keyFunc = func(c fiber.Ctx) string { return clientaddr.Key(c.IP(), bits) }
	}
	return h.serve
}

func (h *handler) serve(c fiber.Ctx) error {
	if h.next != nil && h.next(c) {
		return c.Next()
	}
	var first quota.Limit // the limit MaxFunc and ExpirationFunc set for this request
	if h.maxFunc != nil {
		if first.Max = h.maxFunc(c); first.Max <= 0 {
			return c.Next()
		}
	}
	if h.expirationFunc != nil {
		first.Expiration = max(0, h.expirationFunc(c))
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
		// is free to change; the refund and the pk of the headers written
		// after it need it as it is now.
		key = string([]byte(key))
	}
	var start time.Time
	if h.onDecision != nil {
		start = time.Now()
	}
	ctx := h.context(c)
	var res quota.Result
	var err error
	var id string // the request's IdempotencyKey
	switch {
	case first != (quota.Limit{}):
		res, err = h.engine.TakeWith(ctx, key, cost, first)
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
		value := headers.RetryAfterValue(buf[:0], res.RetryAfter())
		if front := headers.ExhaustedInFront(fieldsOf(c), nil); front > int64(res.RetryAfter()/time.Second) {
			value = strconv.AppendInt(buf[:0], front, 10)
		}
		c.Response().Header.SetCanonical(headers.NameRetryAfter, value)
		c.RequestCtx().SetUserValue(rejectedBehind{}, true)
		return c.SendStatus(fiber.StatusServiceUnavailable)
	}
	if !res.Allowed() && !h.dryRun {
		h.foldNames(c)
		out := headers.AcquireOut()
		h.headers.Write(out, fieldsOf(c), &res, key, false)
		fasthttpfields.Set(&c.Response().Header, out)
		c.RequestCtx().SetUserValue(rejectedBehind{}, true)
		return h.limitReached(c)
	}
	err = c.Next()
	if res.Allowed() && h.refunds && cost != 0 {
		if failed := responseStatus(c, err) >= fiber.StatusBadRequest; (failed && h.skipFailed) || (!failed && h.skipOK) {
			if after, refundErr := h.engine.RefundOnce(h.context(c), key, id, cost, &res); refundErr == nil {
				res = after
			}
		}
	}
	h.foldNames(c)
	rejected := c.RequestCtx().UserValue(rejectedBehind{}) != nil
	if limit, remaining, reset, ok := h.headers.Plain(&res); ok && !rejected {
		fasthttpfields.SetPlain(&c.Response().Header, h.headers, limit, remaining, reset)
		return err
	}
	out := headers.AcquireOut()
	h.headers.WriteAdmitted(out, fieldsOf(c), &res, key, h.dryRun, rejected)
	fasthttpfields.Set(&c.Response().Header, out)
	return err
}

// context is the context a decision runs under: in memory, fasthttp's
// request context, whose start time spares a clock read; a store call runs
// under the application's context.
func (h *handler) context(c fiber.Ctx) context.Context {
	if h.memory {
		return c.RequestCtx()
	}
	return c.Context()
}

// report calls OnDecision with the result res on key, taken since start:
// the event describes the most restrictive limit.
func (h *handler) report(c fiber.Ctx, key string, cost int, res *quota.Result, start time.Time) {
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
func responseStatus(c fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// responseFields are a Fiber response's header fields, as package headers
// reads them.
type responseFields fasthttp.ResponseHeader

func (f *responseFields) Peek(name []byte) []byte {
	return (*fasthttp.ResponseHeader)(f).PeekBytes(name)
}

// fieldsOf returns c's response header fields.
func fieldsOf(c fiber.Ctx) headers.Fields {
	return (*responseFields)(&c.Response().Header)
}

// rejectedBehind is the request's user value that says a limiter behind
// this one (later in the chain) rejected the request. A limiter in front
// then leaves that limiter's fields and Retry-After as they are.
type rejectedBehind struct{}

// foldNames gives the rate-limit fields of c's response the names the
// limiter reads and sets, when c's app does not normalize header names
// (see fasthttpfields.Fold); with normalized names it does nothing.
func (h *handler) foldNames(c fiber.Ctx) {
	if h.normalizing.Of(c.App(), namesAsGiven) {
		fasthttpfields.Fold(&c.Response().Header, h.headers)
	}
}

// namesAsGiven reports whether app keeps header names as they are given
// (DisableHeaderNormalizing).
func namesAsGiven(app *fiber.App) bool { return app.Config().DisableHeaderNormalizing }
