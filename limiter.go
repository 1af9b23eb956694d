// Package limiter is a rate-limiting middleware for Fiber v2, configured like
// Fiber's own middleware/limiter, with a fixed window, a sliding window and a
// token bucket, millisecond-exact time, and headers on every response.
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
	next           func(*fiber.Ctx) bool
	maxFunc        func(*fiber.Ctx) int
	costFunc       func(*fiber.Ctx) int
	keyFunc        func(*fiber.Ctx) string
	limitReached   fiber.Handler
	backend        backend
	inMemory       bool // the backend is the manager, which reads the request's time from c.Context()
	base           rule
	fixedBurst     bool // Burst was set: the bucket's capacity does not follow MaxFunc
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
	if cfg.Burst != 0 {
		if alg != algToken {
			panic(fmt.Sprintf("limiter: Burst is %d but only TokenBucket uses it; remove it or use TokenBucket{}", cfg.Burst))
		}
	}
	window := windowMillis(cfg.Expiration)
	h := &handler{
		next:           cfg.Next,
		maxFunc:        cfg.MaxFunc,
		costFunc:       cfg.Cost,
		keyFunc:        cfg.KeyGenerator,
		limitReached:   cfg.LimitReached,
		base:           rule{limit: int64(cfg.Max), burst: int64(cfg.Max), window: window},
		fixedBurst:     cfg.Burst > 0,
		skipFailed:     cfg.SkipFailedRequests,
		skipSuccessful: cfg.SkipSuccessfulRequests,
		dryRun:         cfg.DryRun,
		onDecision:     cfg.OnDecision,
		alg:            alg,
		algorithm:      algorithmNames[alg],
	}
	if cfg.Burst > 0 {
		h.base.burst = int64(cfg.Burst)
	}
	var constLimit int64
	if cfg.MaxFunc == nil {
		constLimit = h.base.limit
		if alg == algToken {
			constLimit = h.base.burst
		}
	}
	h.headers = newHeaderWriter(cfg, constLimit, h.policyWindow(h.base))
	clock := cfg.clock
	if cfg.Storage == nil {
		h.backend = newManager(alg, cfg.MaxKeys, clock)
		h.inMemory = true
		h.backendName = "memory"
		// The raw-bytes IP key saves formatting the address, but is no
		// text to show in a header or hand to a hook.
		if isDefaultKeyGenerator(cfg.KeyGenerator) && cfg.OnDecision == nil && !cfg.HeaderPartitionKey {
			h.keyFunc = (&ipKeyer{}).key
		}
	} else if conn, ok := cfg.Storage.(redisConn); ok {
		client := conn.Conn()
		h.backend = newGuardedStore(newRedisBackend(conn, alg, cfg.KeyPrefix, clock), honorsContext(client), cfg, alg)
		h.backendName = "redis"
	} else {
		if clock == nil {
			clock = wallMillis
		}
		h.backend = newGuardedStore(newStorageBackend(cfg.Storage, alg, cfg.KeyPrefix, clock), false, cfg, alg)
		h.backendName = "storage"
	}
	h.retryClosed = time.Duration(max(1, ceilSeconds(cfg.BreakerCooldown))) * time.Second
	h.retryUnavailable = []byte(strconv.FormatInt(max(1, ceilSeconds(cfg.BreakerCooldown)), 10))
	return h.serve
}

func (h *handler) serve(c *fiber.Ctx) error {
	if h.next != nil && h.next(c) {
		return c.Next()
	}
	r := h.base
	if h.maxFunc != nil {
		limit := int64(h.maxFunc(c))
		if limit <= 0 {
			return c.Next()
		}
		r.limit = clampLimit(limit, r.window)
		if !h.fixedBurst {
			r.burst = r.limit
		}
	}
	cost := int64(1)
	if h.costFunc != nil {
		if cost = int64(h.costFunc(c)); cost < 0 {
			return fmt.Errorf("limiter: Cost returned %d for %s %s; it must be >= 0", cost, c.Method(), c.Path())
		}
	}
	key := h.keyFunc(c)
	refunds := h.skipFailed || h.skipSuccessful
	if refunds {
		// The key may point into request buffers that the handler below
		// is free to change; the refund needs it as it is now.
		key = string([]byte(key))
	}
	ctx := h.context(c)
	var start time.Time
	if h.onDecision != nil {
		start = time.Now()
	}
	d, err := h.backend.take(ctx, key, r, cost)
	switch err {
	case nil:
		if h.onDecision != nil {
			h.report(c, key, cost, d, sourceOf(d.source), start)
		}
	case errFailOpen:
		if h.onDecision != nil {
			h.report(c, key, cost, Decision{Allowed: true, Limit: h.quota(r)}, SourceFailOpen, start)
		}
		return c.Next()
	case errFailClosed:
		if h.onDecision != nil {
			h.report(c, key, cost, Decision{Limit: h.quota(r), RetryAfter: h.retryClosed}, SourceFailClosed, start)
		}
		if h.dryRun {
			return c.Next()
		}
		if front := exhaustedInFront(&c.Response().Header, nil); front > int64(h.retryClosed/time.Second) {
			c.Response().Header.SetCanonical(headerRetryAfter, strconv.AppendInt(nil, front, 10))
		} else {
			c.Response().Header.SetBytesV(fiber.HeaderRetryAfter, h.retryUnavailable)
		}
		return c.SendStatus(fiber.StatusServiceUnavailable)
	default:
		return fmt.Errorf("limiter: rate-limit storage failed: %w", err)
	}
	h.headers.write(c, d, key, h.policyWindow(r), h.dryRun)
	if !d.Allowed {
		if h.dryRun {
			return c.Next() // counted nothing: nothing to refund
		}
		return h.limitReached(c)
	}
	if !refunds || cost == 0 {
		return c.Next()
	}
	err = c.Next()
	if failed := responseStatus(c, err) >= fiber.StatusBadRequest; (failed && h.skipFailed) || (!failed && h.skipSuccessful) {
		if rerr := h.backend.refund(ctx, key, r, cost, d); rerr != nil && err == nil {
			err = fmt.Errorf("limiter: rate-limit refund failed: %w", rerr)
		}
	}
	return err
}

// report calls OnDecision with decision d on key, answered by src, taken
// since start.
func (h *handler) report(c *fiber.Ctx, key string, cost int64, d Decision, src DecisionSource, start time.Time) {
	h.onDecision(c, DecisionEvent{
		Key:        key,
		Allowed:    d.Allowed,
		DryRun:     h.dryRun,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Cost:       int(cost),
		RetryAfter: d.RetryAfter,
		Algorithm:  h.algorithm,
		Backend:    h.backendName,
		Source:     src,
		Latency:    time.Since(start),
	})
}

// quota is the Limit of a decision under r: the bucket's capacity for the
// token bucket, else the limit.
func (h *handler) quota(r rule) int {
	if h.alg == algToken {
		return int(r.burst)
	}
	return int(r.limit)
}

// policyWindow is the w of the IETF RateLimit-Policy for rule r: the
// window, or for the token bucket the time an empty bucket takes to fill.
func (h *handler) policyWindow(r rule) time.Duration {
	ms := r.window
	if h.alg == algToken && r.burst != r.limit {
		ms = (r.burst*r.window + r.limit - 1) / r.limit // below 2^63: both products are within maxLimitWindow
	}
	return time.Duration(ms) * time.Millisecond
}

// context is what the backend's calls run under: for a store, the user
// context (c.UserContext, which handlers may give a deadline); for the
// in-memory manager, the fasthttp.RequestCtx, whose Time it reads (it does
// not wait on the context).
func (h *handler) context(c *fiber.Ctx) context.Context {
	if h.inMemory {
		return c.Context()
	}
	return c.UserContext()
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
