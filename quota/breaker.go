package quota

import "sync/atomic"

// breaker keeps requests off a store that is out of reach: after threshold
// calls in a row have failed that way (timed out, or failed on the
// network), it opens for cooldown ms, during which allow refuses every
// call; then it gives one caller the probe, which reports back with answered
// (the breaker closes) or failed (another cooldown). Any answer from the
// store closes it. Times are ms. Safe for concurrent use, without locks.
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
// answered or failed.
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

// answered records a call that the store answered (with a result or an
// error reply): the breaker closes.
func (b *breaker) answered(probe bool) {
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

// failed records, at now, a call that found the store out of reach, and
// reports whether the breaker is open after it.
func (b *breaker) failed(now int64, probe bool) bool {
	until := now + b.cooldown
	if until == 0 {
		until = 1 // 0 means closed
	}
	if probe {
		// Unless a call answered while the probe was out and closed it.
		if open := b.openUntil.Load(); open != 0 {
			b.openUntil.CompareAndSwap(open, until)
		}
		b.probing.Store(false)
		return b.open()
	}
	if b.failures.Add(1) >= b.threshold {
		b.openUntil.CompareAndSwap(0, until)
	}
	return b.open()
}
