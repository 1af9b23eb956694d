package limiter

import (
	"reflect"
	"time"

	"github.com/gofiber/fiber/v3"
)

// maxOf is the MaxFunc that stands for a Max of n: what configDefault fills
// in, as Fiber v3 does, for a Handler of the user's own to call. The
// built-in handlers tell it apart from a user's MaxFunc (standsForMax)
// and read Max instead, without a call per request. Not inlined: an
// inlined copy of the closure would have code of its own.
//
//go:noinline
func maxOf(n int) func(fiber.Ctx) int {
	return func(fiber.Ctx) int { return n }
}

// expirationOf is the ExpirationFunc that stands for an Expiration of d,
// as maxOf for Max.
//
//go:noinline
func expirationOf(d time.Duration) func(fiber.Ctx) time.Duration {
	return func(fiber.Ctx) time.Duration { return d }
}

// Every function maxOf and expirationOf make shares its code with the
// others of its kind, whatever value it holds.
var (
	maxOfCode        = reflect.ValueOf(maxOf(0)).Pointer()
	expirationOfCode = reflect.ValueOf(expirationOf(0)).Pointer()
)

// standsForMax reports whether f is no MaxFunc of the user's own: unset,
// or made by maxOf (ConfigDefault's, or one configDefault filled in).
func standsForMax(f func(fiber.Ctx) int) bool {
	return f == nil || reflect.ValueOf(f).Pointer() == maxOfCode
}

// standsForExpiration reports whether f is no ExpirationFunc of the
// user's own, as standsForMax.
func standsForExpiration(f func(fiber.Ctx) time.Duration) bool {
	return f == nil || reflect.ValueOf(f).Pointer() == expirationOfCode
}
