package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Outcomes of a guarded store's take that are not a decision: the
// FailurePolicy's answer when the store cannot give one.
var (
	errFailOpen   = errors.New("limiter: storage unavailable: admitting (FailOpen)")
	errFailClosed = errors.New("limiter: storage unavailable: rejecting (FailClosed)")
)

// guardedStore is a store backend (Redis or a fiber.Storage) behind what a
// remote store needs: a deny cache in front, a timeout on every call, a
// breaker, and the failure policy for when there is no answer. Its take
// returns a Decision (from the store, the deny cache or the fallback
// limiter) or errFailOpen or errFailClosed; its refund never fails a
// request, and reports errors to the hook only.
type guardedStore struct {
	store      backend
	ctxTimeout bool // the store returns by its context's deadline; else calls run on a goroutine
	timeout    time.Duration
	breaker    *breaker
	deny       *denyCache // nil when disabled
	fallback   *manager   // FailFallback only
	policy     FailurePolicy
	reporter   *errorReporter
	clock      func() int64 // ms; nil: monotonic ms since origin
	origin     time.Time
}

func newGuardedStore(store backend, ctxTimeout bool, cfg Config, alg algorithm) *guardedStore {
	g := &guardedStore{
		store:      store,
		ctxTimeout: ctxTimeout,
		timeout:    cfg.StorageTimeout,
		breaker:    newBreaker(cfg.BreakerFailures, windowMillis(cfg.BreakerCooldown)),
		policy:     cfg.FailurePolicy,
		reporter:   newErrorReporter(cfg.OnStorageError),
		clock:      cfg.clock,
		origin:     time.Now(),
	}
	if !cfg.DisableDenyCache {
		g.deny = newDenyCache(cfg.DenyCacheKeys)
	}
	if cfg.FailurePolicy == FailFallback {
		g.fallback = newManager(alg, cfg.MaxKeys, cfg.clock)
	}
	return g
}

func (g *guardedStore) now() int64 {
	if g.clock != nil {
		return g.clock()
	}
	return int64(time.Since(g.origin) / time.Millisecond)
}

func (g *guardedStore) take(ctx context.Context, key string, r rule, cost int64) (Decision, error) {
	now := g.now()
	var gen uint64
	if g.deny != nil {
		d, ok, g0 := g.deny.check(key, now, r, cost)
		if ok {
			return d, nil
		}
		gen = g0
	}
	ok, probe := g.breaker.allow(now)
	if !ok {
		return g.unavailable(ctx, key, r, cost)
	}
	d, err := within(ctx, g, key, func(ctx context.Context, key string) (Decision, error) {
		return g.store.take(ctx, key, r, cost)
	})
	if err != nil {
		g.failed(probe, err)
		return g.unavailable(ctx, key, r, cost)
	}
	g.breaker.answered(probe)
	if g.deny != nil && !d.Allowed {
		g.deny.add(key, now, r, cost, d, gen)
	}
	return d, nil
}

func (g *guardedStore) refund(ctx context.Context, key string, r rule, cost int64, d Decision) error {
	switch d.source {
	case fromFallback:
		return g.fallback.refund(ctx, key, r, cost, d)
	case fromDenyCache:
		return nil // nothing was counted
	}
	if g.deny != nil {
		g.deny.forget(key)
	}
	ok, probe := g.breaker.allow(g.now())
	if !ok {
		return nil // the store is not answering: the credit is lost
	}
	_, err := within(ctx, g, key, func(ctx context.Context, key string) (struct{}, error) {
		return struct{}{}, g.store.refund(ctx, key, r, cost, d)
	})
	if err != nil {
		g.failed(probe, fmt.Errorf("limiter: refund: %w", err))
		return nil
	}
	g.breaker.answered(probe)
	return nil
}

// failed records a failed call: a timeout counts towards opening the
// breaker; an error the store answered with closes it like any answer.
func (g *guardedStore) failed(probe bool, err error) {
	now := g.now()
	if errors.Is(err, ErrStorageTimeout) {
		g.breaker.timedOut(now, probe)
	} else {
		g.breaker.answered(probe)
	}
	g.reporter.failed(now, err, g.breaker.open())
}

// unavailable is the failure policy's answer.
func (g *guardedStore) unavailable(ctx context.Context, key string, r rule, cost int64) (Decision, error) {
	switch g.policy {
	case FailOpen:
		return Decision{}, errFailOpen
	case FailClosed:
		return Decision{}, errFailClosed
	}
	d, err := g.fallback.take(ctx, key, r, cost)
	d.source = fromFallback
	return d, err
}

// within runs call on the store with g.timeout, under ctx's values but not
// its cancellation: a client that goes away, or a deadline the application
// derives from the request, must not turn a decision into the failure
// policy's (FailOpen would admit it). When the store returns by its
// context's deadline, call runs here. Otherwise it runs on a goroutine of
// its own with a copy of key (the request's buffers are reused once it
// ends), and within returns at the deadline while call goes on: its result
// is then dropped. A panic in call is returned as an error, on either path.
func within[T any](ctx context.Context, g *guardedStore, key string, call func(ctx context.Context, key string) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	if g.ctxTimeout {
		v, err := guarded(ctx, key, call)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%v): %w", ErrStorageTimeout, g.timeout, err)
		}
		return v, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	key = strings.Clone(key)
	go func() {
		v, err := guarded(ctx, key, call)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w (%v)", ErrStorageTimeout, g.timeout)
	}
}

// guarded runs call, turning a panic into an error.
func guarded[T any](ctx context.Context, key string, call func(ctx context.Context, key string) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limiter: storage call panicked: %v", p)
		}
	}()
	return call(ctx, key)
}
