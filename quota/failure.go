package quota

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"sync/atomic"
	"time"
)

// FailurePolicy says what the limiter does with a request when its Storage
// fails or the breaker keeps requests off it (Config.FailurePolicy).
type FailurePolicy uint8

const (
	// FailFallback decides the take with an in-memory limiter of this
	// process, with the same limits and key. It keeps limiting while the
	// store is down, each process on its own: N processes admit up to N
	// times the limit between them. A Redis call that timed out while the
	// breaker was closed, Redis having answered before and not refused
	// service since, is rejected instead, for 1 s with Remaining 0 (Source
	// SourceFallback): Redis, slow rather than down, may still count it.
	// The default.
	FailFallback FailurePolicy = iota
	// FailOpen admits the take, uncounted: a Result with Source
	// SourceFailOpen, each limit's Limit, and Remaining 0. The middlewares
	// send no rate-limit headers with it.
	FailOpen
	// FailClosed rejects the take: a Result with Source SourceFailClosed
	// and a RetryAfter of the breaker's cool-down rounded up to whole
	// seconds, at least 1 s. The middlewares answer 503 Service
	// Unavailable with that Retry-After.
	FailClosed
	// FailError returns the store's error from the take (Take, TakeInto,
	// TakeWith, TakeUpTo, TakeIdempotent), wrapped: errors.Is and errors.As
	// reach it. Nothing answers in its place, and every take calls the
	// store: there is no fallback, and the breaker never keeps calls off
	// it, so each request waits for its own call, up to StorageTimeout
	// (a rejection that the store made earlier is still answered by the
	// deny cache until its RetryAfter, for 900 ms at most, unless
	// DisableDenyCache is set).
	// The middlewares hand the error to the framework's error handler,
	// which usually answers 500. It is what Fiber's own limiter does with
	// a storage error: choose it when a request that cannot be counted
	// must fail, and the application's error handler is to decide how.
	FailError
)

// String returns the policy's name, as in the constant's name.
func (p FailurePolicy) String() string {
	switch p {
	case FailFallback:
		return "FailFallback"
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	case FailError:
		return "FailError"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}

// ErrStorageTimeout is the error of a Storage call that did not answer
// within Config.StorageTimeout.
var ErrStorageTimeout = errors.New("limiter: storage call timed out")

// StorageError is what Config.OnStorageError receives: a report of failed
// storage calls, or (with Failures 0) a warning about the storage's
// settings, such as one wrapping ErrStorageEvicts.
type StorageError struct {
	// Err is the latest failure: the storage's error, or one wrapping
	// ErrStorageTimeout; or the warning.
	Err error
	// Failures is the number of failed calls since the previous report,
	// including this one; 0 for a warning.
	Failures int
	// BreakerOpen reports whether the breaker is open: requests are going
	// to the FailurePolicy without waiting on Storage.
	BreakerOpen bool
}

// Error describes the failure, or the warning.
func (e *StorageError) Error() string {
	if e.Failures == 0 {
		return e.Err.Error()
	}
	state := "closed"
	if e.BreakerOpen {
		state = "open"
	}
	return fmt.Sprintf("limiter: %d storage call(s) failed since the last report (breaker %s): %v", e.Failures, state, e.Err)
}

// Unwrap returns Err.
func (e *StorageError) Unwrap() error { return e.Err }

// errorReportInterval is the least time between two calls of
// Config.OnStorageError, in ms.
const errorReportInterval = 1000

// errorReporter calls the user's hook with storage failures, or without
// one logs them with the standard logger: the first at once, then at most
// once per errorReportInterval, counting the failures in between.
type errorReporter struct {
	hook    func(error)
	last    atomic.Int64 // ms of the last report
	pending atomic.Int64 // failures not reported yet
}

func newErrorReporter(hook func(error)) *errorReporter {
	if hook == nil {
		// A store that fails unseen is a limit that is not kept: each
		// replica deciding alone, say, admits its own Max.
		hook = func(err error) { log.Print(err) }
	}
	r := &errorReporter{hook: hook}
	r.last.Store(math.MinInt64 / 2)
	return r
}

// failed records a failure at now (ms) and reports it if it is time to.
func (r *errorReporter) failed(now int64, err error, breakerOpen bool) {
	r.pending.Add(1)
	last := r.last.Load()
	if now-last < errorReportInterval || !r.last.CompareAndSwap(last, now) {
		return
	}
	r.hook(&StorageError{Err: err, Failures: int(r.pending.Swap(0)), BreakerOpen: breakerOpen})
}

// slowRetry is the RetryAfter of a take that failedTake rejects: the
// least that Retry-After, in whole seconds, can say.
const slowRetry = time.Second

// failedTake answers a take whose call failed with err. A call that
// failed because its request ended gets that error, whatever the policy;
// under FailError every failed call gets its error, wrapped. Under FailFallback
// a Redis call that ran out of time is not handed to the fallback unless
// Redis is out of service: its script may still run (a busy Redis runs
// what it has read, after the caller has gone), and Redis may hold the key
// spent, neither of which the fallback knows, so that its admission could
// be one beyond the limit. A slow Redis is not an absent one: the take is
// rejected for slowRetry, with Remaining 0 and Source SourceFallback. The
// fallback decides once the breaker has opened, when this call, or another
// within a cool-down, found Redis refusing service (failureNotRun), and
// before Redis has answered this limiter at all: until then a timeout
// cannot tell a slow Redis from one that is not there (go-redis retries a
// refused dial past StorageTimeout before it says so). Other failures, and
// the other policies, get unavailable's answer.
func (g *guardedStore) failedTake(ctx context.Context, key string, ls *limits, cost int64, err error) (Result, error) {
	if endedWithRequest(err) {
		return Result{}, err // no failure of the store's: no policy answers it (request_ended.go)
	}
	if g.policy == FailError {
		return Result{}, fmt.Errorf("limiter: storage failed: %w", err)
	}
	if g.policy != FailFallback || !g.countsLate || !errors.Is(err, ErrStorageTimeout) || g.store.classify(err) == failureNotRun ||
		g.answeredAt.Load() < 0 || g.refusedAt.Load() >= int64(time.Since(g.origin)/time.Millisecond)-g.breaker.cooldown {
		return g.unavailable(ctx, key, ls, cost), nil
	}
	v := Result{n: ls.n, source: SourceFallback}
	for i := range ls.n {
		c := capacity(g.alg, ls.r[i])
		v.each[i] = Decision{Limit: int(c), RetryAfter: slowRetry}
		if cost > c {
			v.each[i].RetryAfter = Never
		}
	}
	return v, nil
}

// unavailable is the failure policy's answer: FailOpen's admission and
// FailClosed's rejection carry each limit's Limit (Remaining 0), and
// FailClosed's a RetryAfter of the breaker's cool-down. FailError, whose
// breaker never opens, gets FailClosed's should a take meet no store to
// call.
func (g *guardedStore) unavailable(ctx context.Context, key string, ls *limits, cost int64) Result {
	if g.policy == FailFallback {
		v, _ := g.fallback.take(ctx, key, ls, cost)
		v.source = SourceFallback
		return v
	}
	open := g.policy == FailOpen
	v := Result{n: ls.n, source: SourceFailOpen}
	if !open {
		v.source = SourceFailClosed
	}
	for i := range ls.n {
		v.each[i] = Decision{Allowed: open, Limit: int(capacity(g.alg, ls.r[i]))}
		if !open {
			v.each[i].RetryAfter = g.retryClosed
		}
	}
	return v
}
