package limiter

import "sync/atomic"

// breaker keeps requests off a failing store: after threshold failed calls
// in a row it opens for cooldown ms, during which allow refuses every call;
// then it lets one call through as a probe, and closes as soon as a call
// succeeds (a failed probe opens it for another cooldown). Times are ms of
// a monotonic clock. Safe for concurrent use, without locks.
type breaker struct {
	threshold int32
	cooldown  int64
	failures  atomic.Int32 // failed calls in a row
	openUntil atomic.Int64 // 0 when closed
	probing   atomic.Bool  // a probe is out
}

func newBreaker(threshold int, cooldown int64) *breaker {
	return &breaker{threshold: int32(threshold), cooldown: max(1, cooldown)}
}

// allow reports whether a call may go to the store at now, and whether
// that call is the probe of an open breaker, which must report back with
// succeeded or failed.
func (b *breaker) allow(now int64) (ok, probe bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// open reports whether the breaker is open (a probe may be out).
func (b *breaker) open() bool { return b.openUntil.Load() != 0 }

// succeeded records a call that the store answered: the breaker closes.
func (b *breaker) succeeded(probe bool) {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.openUntil.Load() != 0 {
		b.openUntil.Store(0)
	}
	if probe {
		b.probing.Store(false)
	}
}

// reprobeAfter is how soon (ms) an open breaker probes again after a probe
// that the store refused at once, rather than after a whole cool-down: such
// a probe costs its request no wait. A go-redis pool that has failed to
// dial many times in a row refuses every call at once until its own
// background dial succeeds (it tries once a second), so frequent cheap
// probes find the store back within about that second.
const reprobeAfter = 50

// failed records a failed call at now. quick says the store refused the
// call at once (an error, not a timeout).
func (b *breaker) failed(now int64, probe, quick bool) {
	wait := b.cooldown
	if probe && quick {
		wait = min(wait, reprobeAfter)
	}
	until := now + wait
	if until == 0 {
		until = 1 // 0 means closed
	}
	if probe {
		b.openUntil.Store(until)
		b.probing.Store(false)
		return
	}
	if b.failures.Add(1) >= b.threshold {
		b.openUntil.CompareAndSwap(0, until)
	}
}
