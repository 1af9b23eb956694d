package quota

import (
	"errors"
	"fmt"
)

// A Storage with the context methods is given the request's context,
// cancellation included (withinRequest): a store may stop work for a
// client that went away. A call that fails once the request's own
// context has ended (canceled, or past a deadline of the application's,
// not StorageTimeout) failed because of the request, not because of the
// store: it counts nothing towards the breaker, is not reported to
// OnStorageError (unless the application's deadline ended it: a store
// slower than every request allows must not go unseen), and the take returns an error wrapping the context's
// error instead of the failure policy's answer, which the middlewares
// hand to the framework. FailOpen in particular must not admit a request
// that nobody decided.

// requestEndedError is the error of a store call that failed once its
// request's context had ended. It wraps the context's error and the
// store's.
type requestEndedError struct {
	ctxErr error // the request context's Err
	err    error // the store's
}

func (e *requestEndedError) Error() string {
	return fmt.Sprintf("limiter: the request ended (%v) before the storage answered: %v", e.ctxErr, e.err)
}

func (e *requestEndedError) Unwrap() []error { return []error{e.ctxErr, e.err} }

// endedWithRequest reports whether err is that of a call that failed
// because its request ended (a *requestEndedError): no failure of the
// store's, for the breaker or the error hook.
func endedWithRequest(err error) bool {
	var ended *requestEndedError
	return errors.As(err, &ended)
}
