package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// within runs call on the store with g.timeout. A store that takes the
// request's context (requestScoped: a Storage with the context methods)
// gets it whole, see withinRequest. Any other (Redis, a Storage without
// them) gets ctx's values but not its cancellation: a client that goes
// away, or a deadline the application derives from the request, must not
// turn a decision into the failure policy's (FailOpen would admit it); the
// Redis backend keeps that, since its calls are batched with other
// requests' and a script that ran counts whether its caller waited or not.
// When the store returns by its context's deadline, call runs here.
// Otherwise it runs on a goroutine of its own with a copy of key (the
// request's buffers are reused once it ends), and within returns at the
// deadline while call goes on: its result is then dropped. A panic in call
// is returned as an error, on either path.
func within[T any](ctx context.Context, g *guardedStore, key string, call func(ctx context.Context, key string) (T, error)) (T, error) {
	if s, ok := g.store.(requestScoped); ok && s.takesRequestContext() {
		return withinRequest(ctx, g, key, call)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	if g.ctxTimeout {
		v, err := recovering(ctx, key, call)
		// A read that the connection's deadline (ctx's) ended can return
		// a moment before ctx's own timer marks it done.
		if dl, _ := ctx.Deadline(); err != nil && (ctx.Err() != nil || !time.Now().Before(dl) || errors.Is(err, context.DeadlineExceeded)) {
			err = &timedOut{err: err, timeout: g.timeout}
		}
		return v, err
	}
	v, err, answered := callAside(ctx, ctx, g, key, call)
	if answered && err != nil && errors.Is(err, context.DeadlineExceeded) {
		// Ran late: its own deadline, or a pipeline it shared ended by
		// another call's (storage/redis), either of which Redis may have
		// run.
		err = &timedOut{err: err, timeout: g.timeout}
	}
	return v, err
}

// callAside runs call under callCtx on a goroutine of its own, with a copy
// of key (the request's buffers are reused once it ends), and waits for
// it until waited ends: answered is false, and the error
// ErrStorageTimeout's, when the wait ended first; call goes on, and its
// result is dropped.
func callAside[T any](waited, callCtx context.Context, g *guardedStore, key string, call func(ctx context.Context, key string) (T, error)) (v T, err error, answered bool) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	key = strings.Clone(key)
	go func() {
		v, err := recovering(callCtx, key, call)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err, true
	case <-waited.Done():
		return v, fmt.Errorf("%w (%v)", ErrStorageTimeout, g.timeout), false
	}
}

// requestScoped is a backend whose store may be given the request's
// context, cancellation included: a Storage with the context methods.
type requestScoped interface {
	takesRequestContext() bool
}

// withinRequest is within for a store that takes the request's context:
// call gets ctx, its values and its cancellation, with the StorageTimeout
// deadline on it (or the application's, when sooner), and runs on a
// goroutine of its own, as within's. Only StorageTimeout stops the wait:
// a request that has ended still has its call made and its answer used,
// so that a store that ignores the cancellation decides the request as
// usual. A call that fails once the request's own context has ended
// (canceled, or past the application's deadline) failed because the
// client went away, not because of the store: its error is a
// *requestEndedError, which the guard neither counts towards the breaker
// nor reports, and which a take returns to its caller (wrapping the
// context's error) rather than answering with the failure policy (FailOpen
// would admit a request nobody decided). The call can tell whether the
// guard has stopped waiting for it with gaveUp.
func withinRequest[T any](ctx context.Context, g *guardedStore, key string, call func(ctx context.Context, key string) (T, error)) (T, error) {
	waited, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	dl, _ := waited.Deadline()
	callCtx, cancelCall := context.WithDeadline(ctx, dl)
	defer cancelCall()
	callCtx = context.WithValue(callCtx, waitedKey{}, waited)
	v, err, answered := callAside(waited, callCtx, g, key, call)
	switch {
	case err == nil || !answered:
	case ctx.Err() != nil:
		err = &requestEndedError{ctxErr: ctx.Err(), err: err}
	case waited.Err() != nil || !time.Now().Before(dl) || errors.Is(err, context.DeadlineExceeded):
		// A store that honours the deadline returns by it, a moment
		// before waited marks it done.
		err = &timedOut{err: err, timeout: g.timeout}
	}
	return v, err
}

// waitedKey keys the context that ends when withinRequest stops waiting
// for a call, in the call's context.
type waitedKey struct{}

// gaveUp returns a context that ends when the guard stops waiting for the
// call that ctx was given to (StorageTimeout), whatever becomes of the
// request: for a call that withinRequest runs, the context it waits on;
// for one that within runs, ctx itself, which has no cancellation of the
// request's.
func gaveUp(ctx context.Context) context.Context {
	if waited, ok := ctx.Value(waitedKey{}).(context.Context); ok {
		return waited
	}
	return ctx
}

// timedOut is the error of a call that StorageTimeout ended. It wraps
// ErrStorageTimeout and the call's own error, and leads with the latter
// when that names what failed (a refused dial, a reset connection, an
// error reply that go-redis kept retrying) rather than the deadline alone.
type timedOut struct {
	err     error
	timeout time.Duration
}

func (e *timedOut) Error() string {
	if hasCause(e.err) {
		return fmt.Sprintf("%v (StorageTimeout %v)", e.err, e.timeout)
	}
	return fmt.Sprintf("%v (%v): %v", ErrStorageTimeout, e.timeout, e.err)
}

func (e *timedOut) Unwrap() []error { return []error{ErrStorageTimeout, e.err} }

// recovering runs call, turning a panic into an error.
func recovering[T any](ctx context.Context, key string, call func(ctx context.Context, key string) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limiter: storage call panicked: %v", p)
		}
	}()
	return call(ctx, key)
}
