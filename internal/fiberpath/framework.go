package fiberpath

import (
	"errors"
	"net/http"

	"github.com/fiberlimit/limiter/internal/appflag"
)

// ErrorStatus returns a Framework's ErrorStatus for a Fiber version whose
// error type is P (*fiber.Error), its status given by code: the status
// Fiber's default error handler gives a handler's error (a P its code,
// anything else 500), since that handler has not run when the limiter
// reads it.
func ErrorStatus[E any, P interface {
	*E
	error
}](code func(P) int) func(error) int {
	return func(err error) int {
		var fe P
		if errors.As(err, &fe) {
			return code(fe)
		}
		return http.StatusInternalServerError
	}
}

// NamesAsGiven returns a Framework's NamesAsGiven for one limiter: app is
// a context's app, read tells whether an app keeps header names as given
// (its DisableHeaderNormalizing), and each app's answer is remembered.
func NamesAsGiven[C, A any](app func(C) *A, read func(*A) bool) func(C) bool {
	var flag appflag.Flag[A]
	return func(c C) bool { return flag.Of(app(c), read) }
}
