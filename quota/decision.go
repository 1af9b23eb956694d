package quota

import (
	"context"
	"math"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
)

// Never, the longest time.Duration, is the RetryAfter of a take that can
// never be admitted, because its cost is larger than the limit (or the
// token bucket's Burst). The middlewares send no Retry-After header for it.
const Never = timestep.Never

// Decision is the outcome of a take under one limit.
type Decision struct {
	// Allowed reports whether the request was admitted and its cost counted.
	// A rejected request consumes nothing.
	Allowed bool
	// Limit is the quota the decision was made against: Max (or TakeWith's
	// result) for the windows, the bucket capacity Burst for the token bucket.
	Limit int
	// Remaining is how many requests of cost 1 would still be admitted right
	// now, in [0, Limit].
	Remaining int
	// ResetAfter is the time until the key's quota is fully available
	// again; for SlidingLog, until the oldest counted unit leaves the
	// window (and Remaining grows).
	ResetAfter time.Duration
	// RetryAfter is zero for an admitted request. For a rejected one it is the
	// time until the same request would be admitted, or Never when it
	// never can be.
	RetryAfter time.Duration

	// Window is the limit's period, as the RateLimit-Policy header's w
	// gives it: its Expiration, or for TokenBucket the time an empty
	// bucket takes to fill to Burst.
	Window time.Duration

	// countedIn identifies where an admitted cost was counted (the window's
	// start, in the rule's steps, for the windows), so a refund credits
	// that same window.
	countedIn int64
}

// rule is a Limit as the backends decide it: everything they need,
// besides the key and the cost, to decide. max is the Limit's Max, window
// its Expiration in steps.
// Times are integers in steps of step ms (see package timestep), in both
// backends: the Redis twins of the step functions work in Lua doubles,
// which are exact integers below 2^53, so limit*window (window in steps) is
// at most 2^51. The step is 1 ms but for quotas too large for that, and
// headers carry whole seconds anyway.
type rule struct {
	max    int64 // units admitted per window (the token bucket's refill per window)
	burst  int64 // token bucket capacity; equal to max for the windows
	window int64 // steps, >= 1
	step   int64 // ms per step; 0 (rules built by tests) means 1
}

// newRule is the rule of n per window (with burst) for quotas up to
// most: the step is the finest that keeps most × window exact.
func newRule(n, burst int64, window time.Duration, most int64) rule {
	ms := timestep.Millis(window)
	step := timestep.For(most, ms)
	return rule{max: n, burst: burst, window: timestep.Steps(ms, step), step: step}
}

// tooFarAhead reports whether t, a state's time (steps), lies too far
// past now (steps) to be read as the state it says: further than a window,
// or a minute (aheadMS) if longer, which the clocks of replicas and Redis
// failovers may differ by. A state further ahead cannot have been written
// under this rule at a time near now (it was written in other steps, or by
// something else), and reads as no state, so that it cannot hold a key
// off for as long as it says.
func (r rule) tooFarAhead(t, now int64) bool {
	// The window first: a time within it needs no division.
	return t > now+r.window && t > now+ceilDiv(aheadMS, r.stepMillis())
}

// aheadMS is the least span tooFarAhead allows, in ms.
const aheadMS = 60_000

// at is the time nowMS (ms, >= 0) in the rule's steps.
func (r rule) at(nowMS int64) int64 {
	if r.step > 1 {
		return nowMS / r.step
	}
	return nowMS
}

// stepMillis is the length of a step in ms.
func (r rule) stepMillis() int64 { return max(1, r.step) }

// span is n steps as a Duration, saturating as millis does.
func (r rule) span(n int64) time.Duration {
	if step := r.stepMillis(); step > 1 {
		if n > math.MaxInt64/step {
			return millis(math.MaxInt64)
		}
		n *= step
	}
	return millis(n)
}

// maxLimit bounds a limit so that a window's count fits the uint32 slot the
// in-memory manager keeps it in.
const maxLimit = math.MaxUint32

// state is what a key keeps under one limit, or for its rules beside the
// limits' counts (keyEnds). Its fields mean what the algorithm says, and
// each algorithm names them as its Lua twin names its locals (its read and
// state methods, such as fixedWindow's start and count); only the backends,
// which store states whatever they hold, use a, b and c. Two words and a
// half, so that the in-memory manager's entries stay small.
type state struct {
	a, b int64
	c    uint32
}

// Algorithm is how a Limiter decides under each limit (Config.Algorithm).
type Algorithm uint8

const (
	// FixedWindow admits at most Max units per window of Expiration, the
	// window starting at a key's first counted take. The cheapest; a key
	// can spend 2*Max across the boundary of two windows. The default.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow admits while the estimate previous*(1-elapsed/window)
	// + current + cost stays within Max, from the counts of the window
	// running and the one before it: no boundary burst.
	SlidingWindow
	// TokenBucket gives each key a bucket of Burst tokens (default Max)
	// that refills at Max per Expiration; a take of cost n takes n
	// tokens. Short bursts up to Burst, a long-run rate of Max per
	// Expiration, no window edges.
	TokenBucket
	// SlidingLog keeps the time of every unit counted in the last
	// Expiration and admits while they, with the take's cost, stay within
	// Max: exact over any window, with no estimate and no boundary burst.
	// For small, strict limits (5 logins per 15 minutes). A key keeps one
	// entry per unit of Max, so Max is at most 10,000; in memory that is
	// 8 bytes per unit of Max per key (MaxKeys bounds the keys), on Redis
	// 6 bytes per unit counted.
	SlidingLog
)

// Every step function is pure: time comes in as now (ms), nothing is kept
// but the state it is given.
//
// take decides a request of cost units at now and returns the state to keep:
// with the cost counted when it is admitted, else s unchanged.
func (a Algorithm) take(s state, now int64, r rule, cost int64) (state, Decision) {
	d := a.step(&s, now, r, cost)
	return s, d
}

// step is take on the state at s, which it changes only when it admits
// the request: the form of every request's path, where a state and a
// Decision returned together would not fit in registers.
func (a Algorithm) step(s *state, now int64, r rule, cost int64) Decision {
	switch a {
	case FixedWindow:
		return fixedWindow{}.take(s, now, r, cost)
	case SlidingWindow:
		return slidingWindow{}.take(s, now, r, cost)
	case SlidingLog:
		panic("limiter: internal error: SlidingLog's step needs its log (slidingLog.take)")
	}
	return tokenBucket{}.take(s, now, r, cost)
}

// expiry is the time (steps) from which s holds nothing: a fresh state is
// equivalent. It is the latest time the state must be kept.
func (a Algorithm) expiry(s state, r rule) int64 {
	switch a {
	case FixedWindow:
		return fixedWindow{}.expiry(s, r)
	case SlidingWindow:
		return slidingWindow{}.expiry(s, r)
	case SlidingLog:
		return slidingLog{}.expiry(s, r)
	}
	return tokenBucket{}.expiry(s, r)
}

// holds reports whether s still counts something: units in a window, a
// bucket's debt, a log's entries.
func (a Algorithm) holds(s state) bool {
	switch a {
	case FixedWindow:
		_, count := fixedWindow{}.read(s)
		return count > 0
	case SlidingWindow:
		_, cur, prev := slidingWindow{}.read(s)
		return cur > 0 || prev > 0
	case SlidingLog:
		_, count, _ := slidingLog{}.read(s)
		return count > 0
	}
	_, debt := tokenBucket{}.read(s)
	return debt > 0
}

// capacity is the Limit of a decision under r: the bucket's capacity for
// the token bucket, else the limit.
func capacity(alg Algorithm, r rule) int64 {
	if alg == TokenBucket {
		return r.burst
	}
	return r.max
}

// policyWindow is a Decision's Window under rule r: the window, or for the
// token bucket the time an empty bucket takes to fill.
func policyWindow(alg Algorithm, r rule) time.Duration {
	steps := r.window
	if alg == TokenBucket && r.burst != r.max {
		steps = ceilDiv(r.burst*r.window, r.max) // burst*window is within 2^51
	}
	return r.span(steps)
}

// name is the algorithm's tag in storage keys.
func (a Algorithm) name() string {
	switch a {
	case FixedWindow:
		return "fw"
	case SlidingWindow:
		return "sw"
	case SlidingLog:
		return "sl"
	}
	return "tb"
}

// backend keeps the state of every key and applies an algorithm to it,
// under every limit of ls at once (see decideInto). The deciding core
// (algorithms, backends, Decision) knows nothing of Fiber.
type backend interface {
	take(ctx context.Context, key string, ls *limits, cost int64) (Result, error)
	// adjust applies the adjustment v.adjust of cost units: the refund of
	// the take that returned v, or a penalty or a reward; it returns the
	// Result of the state it leaves (as a take of cost 0).
	adjust(ctx context.Context, key string, ls *limits, cost int64, v *Result) (Result, error)
}

// millis converts a span of milliseconds to a Duration: 0 when negative,
// and saturating below Never (about 292 years) when too long.
func millis(n int64) time.Duration {
	switch {
	case n <= 0:
		return 0
	case n >= int64(Never/time.Millisecond):
		return Never - 1
	}
	return time.Duration(n) * time.Millisecond
}

// ceilDiv is ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}
