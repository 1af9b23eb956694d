// Package limiter is a rate-limiting middleware for Fiber v2, configured like
// Fiber's own middleware/limiter, with a fixed window, a sliding window and a
// token bucket, millisecond-exact time, and headers on every response.
//
// State lives in this process by default. Given a Redis Storage (the
// *Storage of github.com/gofiber/storage/redis/v3 works as it is), every
// decision is one atomic Lua script call in Redis, so any number of replicas
// admit exactly the limit between them, on one Redis or a Redis Cluster.
// Several limits, such as 10 per second and 1000 per hour, can be decided as
// one (Config.Limits), and several limiters share a Storage without
// touching each other's state (Config.Name).
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

	"github.com/gofiber/fiber/v2"
)

// LimiterHandler chooses the algorithm: FixedWindow, SlidingWindow or
// TokenBucket. New receives the config with defaults filled in and returns
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
	costFunc     func(*fiber.Ctx) int
	keyFunc      func(*fiber.Ctx) string
	limitReached fiber.Handler
	// One of memory and store decides: called by their own types, so that
	// a request's limits, on its stack, stay there in memory.
	memory         *manager
	store          *guardedStore
	base           limits // MaxFunc changes the first one's limit per request
	fixedBurst     bool   // Burst was set: the bucket's capacity does not follow MaxFunc
	skipFailed     bool
	skipSuccessful bool
	headers        headerWriter
	dryRun         bool
	onDecision     func(*fiber.Ctx, DecisionEvent)
	alg            algorithm
	algorithm      string // DecisionEvent.Algorithm
	backendName    string // DecisionEvent.Backend
	// retryUnavailable is the Retry-After of FailClosed's 503: the breaker's
	// cool-down in whole seconds, at least 1.
	retryUnavailable []byte
	retryClosed      time.Duration // retryUnavailable as a duration, for OnDecision
}

// newHandler builds the middleware for alg. cfg may come straight from a
// user calling FixedWindow{}.New(cfg), so the defaults are applied again.
func newHandler(cfg Config, alg algorithm) fiber.Handler {
	cfg = configDefault(cfg)
	if alg != algToken {
		field, burst := "Burst", cfg.Burst
		for i, l := range cfg.Limits {
			if l.Burst != 0 {
				field, burst = fmt.Sprintf("Limits[%d].Burst", i), l.Burst
			}
		}
		if burst != 0 {
			panic(fmt.Sprintf("limiter: %s is %d but only TokenBucket uses it; remove it or use TokenBucket{}", field, burst))
		}
	}
	h := &handler{
		next:           cfg.Next,
		maxFunc:        cfg.MaxFunc,
		costFunc:       cfg.Cost,
		keyFunc:        cfg.KeyGenerator,
		limitReached:   cfg.LimitReached,
		base:           limitsOf(&cfg),
		fixedBurst:     cfg.Burst > 0,
		skipFailed:     cfg.SkipFailedRequests,
		skipSuccessful: cfg.SkipSuccessfulRequests,
		dryRun:         cfg.DryRun,
		onDecision:     cfg.OnDecision,
		alg:            alg,
		algorithm:      algorithmNames[alg],
	}
	h.headers = newHeaderWriter(cfg, alg, &h.base, cfg.MaxFunc == nil)
	if bits := cfg.IPv6Prefix; isDefaultKeyGenerator(cfg.KeyGenerator) && bits != defaultIPv6Prefix {
		h.keyFunc = func(c *fiber.Ctx) string { return ipKey(c.IP(), bits) }
	}
	clock := cfg.clock
	n := h.base.n
	prefix := keyPrefix(&cfg, alg, &h.base)
	if cfg.Storage == nil {
		h.memory = newManager(alg, n, cfg.MaxKeys, clock)
		h.backendName = "memory"
		// The raw-bytes IP key saves formatting the address, but is no
		// text to show in a header or hand to a hook.
		if isDefaultKeyGenerator(cfg.KeyGenerator) && cfg.OnDecision == nil && !cfg.HeaderPartitionKey {
			h.keyFunc = (&ipKeyer{bits: cfg.IPv6Prefix}).key
		}
	} else if conn, ok := cfg.Storage.(redisConn); ok {
		backend := newRedisBackend(conn, alg, prefix, &cfg)
		h.store = newGuardedStore(backend, honorsContext(backend.store.Conn()), cfg, alg, n)
		h.backendName = "redis"
	} else {
		if clock == nil {
			clock = wallMillis
		}
		h.store = newGuardedStore(newStorageBackend(cfg.Storage, alg, prefix, clock), false, cfg, alg, n)
		h.backendName = "storage"
	}
	if cfg.Storage != nil {
		claimIdentity(h, cfg.Storage, prefix, cfg.Name != "")
	}
	cooldown := max(1, ceilSeconds(cfg.BreakerCooldown))
	h.retryClosed = millis(cooldown * 1000) // saturates for the longest cool-downs
	h.retryUnavailable = strconv.AppendInt(nil, cooldown, 10)
	return h.serve
}

// windowsOf returns the windows of cfg's limits (defaults applied) as
// configured, in ms: for the names of keys and policies.
func windowsOf(cfg *Config) (ms [maxLimits]int64) {
	if len(cfg.Limits) == 0 {
		ms[0] = windowMillis(cfg.Expiration)
	}
	for i, l := range cfg.Limits {
		ms[i] = windowMillis(l.Expiration)
	}
	return ms
}

// limitsOf returns the limits of cfg (defaults applied): Limits, or Max
// per Expiration (with Burst). Each rule's time step fits its largest
// quota: with MaxFunc, the largest a limit can be.
func limitsOf(cfg *Config) limits {
	if len(cfg.Limits) == 0 {
		limit, burst := int64(cfg.Max), int64(cfg.Max)
		if cfg.Burst > 0 {
			burst = int64(cfg.Burst)
		}
		most := max(limit, burst)
		if cfg.MaxFunc != nil {
			most = maxLimit
		}
		return one(newRule(limit, burst, cfg.Expiration, most))
	}
	ls := limits{n: len(cfg.Limits)}
	for i, l := range cfg.Limits {
		limit, burst := int64(l.Max), int64(l.Max)
		if l.Burst > 0 {
			burst = int64(l.Burst)
		}
		ls.r[i] = newRule(limit, burst, l.Expiration, max(limit, burst))
	}
	return ls
}

func (h *handler) serve(c *fiber.Ctx) error {
	if h.next != nil && h.next(c) {
		return c.Next()
	}
	ls := &h.base // read only; a copy when MaxFunc changes it
	var perRequest limits
	if h.maxFunc != nil {
		limit := int64(h.maxFunc(c))
		if limit <= 0 {
			return c.Next()
		}
		perRequest = h.base
		r := &perRequest.r[0]
		r.limit = clampLimit(limit)
		if !h.fixedBurst {
			r.burst = r.limit
		}
		ls = &perRequest
	}
	cost := int64(1)
	if h.costFunc != nil {
		if cost = int64(h.costFunc(c)); cost < 0 {
			return fmt.Errorf("limiter: Cost returned %d for %s %s; it must be >= 0", cost, c.Method(), c.Path())
		}
	}
	key := h.keyFunc(c)
	refunds := h.skipFailed || h.skipSuccessful
	if refunds || h.headers.withKey {
		// The key may point into request buffers that the handler below
		// is free to change (proxy.Forward does); the refund and the pk
		// of the headers written after it need it as it is now.
		key = string([]byte(key))
	}
	var start time.Time
	if h.onDecision != nil {
		start = time.Now()
	}
	var v verdict
	var err error
	if h.memory != nil {
		v, err = h.memory.take(c.Context(), key, ls, cost)
	} else {
		v, err = h.takeStored(c.UserContext(), key, *ls, cost)
	}
	switch err {
	case nil:
		if h.onDecision != nil {
			h.report(c, key, cost, &v, sourceOf(v.source), start)
		}
	case errFailOpen:
		if h.onDecision != nil {
			h.report(c, key, cost, h.failed(ls, true), SourceFailOpen, start)
		}
		return c.Next()
	case errFailClosed:
		if h.onDecision != nil {
			h.report(c, key, cost, h.failed(ls, false), SourceFailClosed, start)
		}
		if h.dryRun {
			return c.Next()
		}
		if front := exhaustedInFront(&c.Response().Header, nil); front > int64(h.retryClosed/time.Second) {
			c.Response().Header.SetCanonical(headerRetryAfter, strconv.AppendInt(nil, front, 10))
		} else {
			c.Response().Header.SetBytesV(fiber.HeaderRetryAfter, h.retryUnavailable)
		}
		c.Context().SetUserValue(rejectedBehind{}, true)
		return c.SendStatus(fiber.StatusServiceUnavailable)
	default:
		return fmt.Errorf("limiter: rate-limit storage failed: %w", err)
	}
	if !v.allowed() && !h.dryRun {
		h.headers.write(c, &v, key, ls, false)
		c.Context().SetUserValue(rejectedBehind{}, true)
		return h.limitReached(c)
	}
	err = c.Next()
	if v.allowed() && refunds && cost != 0 {
		if failed := responseStatus(c, err) >= fiber.StatusBadRequest; (failed && h.skipFailed) || (!failed && h.skipSuccessful) {
			if h.memory != nil {
				v, _ = h.memory.refund(c.Context(), key, ls, cost, &v)
			} else if after, ok := h.refundStored(c.UserContext(), key, *ls, cost, v); ok {
				v = after
			}
		}
	}
	h.headers.writeAdmitted(c, &v, key, ls, h.dryRun)
	return err
}

// takeStored and refundStored call the store with copies of the request's
// limits and verdict, which a call that outlives its deadline may still
// read.
func (h *handler) takeStored(ctx context.Context, key string, ls limits, cost int64) (verdict, error) {
	return h.store.take(ctx, key, &ls, cost)
}

func (h *handler) refundStored(ctx context.Context, key string, ls limits, cost int64, v verdict) (verdict, bool) {
	return h.store.refund(ctx, key, &ls, cost, &v)
}

// failed is the verdict that OnDecision sees when the failure policy
// admitted the request (FailOpen) or rejected it with 503 (FailClosed).
func (h *handler) failed(ls *limits, admitted bool) *verdict {
	v := &verdict{n: ls.n}
	for i := range ls.n {
		v.each[i] = Decision{Allowed: admitted, Limit: int(quota(h.alg, ls.r[i]))}
		if !admitted {
			v.each[i].RetryAfter = h.retryClosed
		}
	}
	return v
}

// report calls OnDecision with verdict v on key, answered by src, taken
// since start: the event describes the most restrictive limit.
func (h *handler) report(c *fiber.Ctx, key string, cost int64, v *verdict, src DecisionSource, start time.Time) {
	i := v.tightest()
	d := &v.each[i]
	h.onDecision(c, DecisionEvent{
		Key:        key,
		Allowed:    d.Allowed,
		DryRun:     h.dryRun,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Cost:       int(cost),
		RetryAfter: v.retryAfter(),
		Expiration: h.base.r[i].span(h.base.r[i].window),
		Algorithm:  h.algorithm,
		Backend:    h.backendName,
		Source:     src,
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

// wallMillis is Unix time in ms, for state shared through a store.
func wallMillis() int64 { return time.Now().UnixMilli() }
