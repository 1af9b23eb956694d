package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

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
		v, err := recovering(ctx, key, call)
		// A read that the connection's deadline (ctx's) ended can return
		// a moment before ctx's own timer marks it done.
		if dl, _ := ctx.Deadline(); err != nil && (ctx.Err() != nil || !time.Now().Before(dl) || errors.Is(err, context.DeadlineExceeded)) {
			err = &timedOut{err: err, timeout: g.timeout}
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
		v, err := recovering(ctx, key, call)
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
