package quota

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
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

// errorReporter calls the user's hook with storage failures: the first at
// once, then at most once per errorReportInterval, counting the failures
// in between.
type errorReporter struct {
	hook    func(error)
	last    atomic.Int64 // ms of the last report
	pending atomic.Int64 // failures not reported yet
}

func newErrorReporter(hook func(error)) *errorReporter {
	r := &errorReporter{hook: hook}
	r.last.Store(math.MinInt64 / 2)
	return r
}

// failed records a failure at now (ms) and reports it if it is time to.
func (r *errorReporter) failed(now int64, err error, breakerOpen bool) {
	if r.hook == nil {
		return
	}
	r.pending.Add(1)
	last := r.last.Load()
	if now-last < errorReportInterval || !r.last.CompareAndSwap(last, now) {
		return
	}
	r.hook(&StorageError{Err: err, Failures: int(r.pending.Swap(0)), BreakerOpen: breakerOpen})
}
