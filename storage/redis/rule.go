package redis

import "time"

// Algorithm selects the rate-limiting algorithm of a Rule.
type Algorithm uint8

const (
	// FixedWindow admits at most Limit units per Window, the window starting
	// at the key's first counted request.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow admits while prev*(1-elapsed/Window) + cur + cost <= Limit.
	SlidingWindow
	// TokenBucket holds Burst tokens, refilled at Limit per Window.
	TokenBucket
	// SlidingLog keeps the time of every unit counted in the last Window
	// and admits while they, with the cost, stay within Limit: exact over
	// any window. A key's value holds 6 bytes per unit counted, so the
	// Limits of a call's rules add up to at most MaxLogLimit.
	SlidingLog
)

// MaxLogLimit is the largest Limit of a SlidingLog rule, and of the
// Limits of a call's rules together: a call reads and rewrites every entry
// of the key, which at 10,000 costs Redis about 0.3-0.6 ms.
const MaxLogLimit = 10_000

// Rule is what a decision is made against.
type Rule struct {
	// Algorithm is how the rule decides: FixedWindow, SlidingWindow,
	// TokenBucket or SlidingLog.
	Algorithm Algorithm
	// Limit is the units admitted per Window (the token bucket's refill per
	// Window). Must be > 0 and below 2^32 (the same for Burst), and for
	// SlidingLog at most MaxLogLimit (with the other rules'); see Step.
	Limit int64
	// Burst is the token bucket's capacity; 0 means Limit. Ignored by the
	// windows.
	Burst int64
	// Window is the window's length, at least 1 ms.
	Window time.Duration
	// Step is the time step the rule is decided in: a state keeps whole
	// steps, and a Window is a whole number of them (rounded up). 0 picks
	// the finest step, 1 ms or more, for which the arithmetic stays exact
	// (Limit and Burst × Window in steps at most 2^51): 1 ms for all but
	// very large quotas, such as a billion per 30 days (1.152 s). A key
	// whose Limit changes from call to call (a per-client limit) needs the
	// same Step on every call: the step of the largest Limit it can have. A
	// state found in other steps (its time far ahead of now in these) reads
	// as no state.
	Step time.Duration
	// BlockFor, set on the first rule of a call, holds off a key that a
	// take is rejected for (one that could be admitted later) for this long
	// after the rejection, whatever its counts: its takes are rejected,
	// with Remaining 0 and RetryAfter the rest of the block. The block's
	// end is kept in the key's value, after the rules' states, so every
	// call on a key must give the same BlockFor, refunds and adjustments
	// too. 0, the default, blocks nothing; other rules' BlockFor is not
	// read.
	BlockFor time.Duration
	// MinInterval, set on the first rule of a call, is the least time
	// between two admitted takes of a key (of a cost above 0): one that
	// comes sooner is rejected, with Remaining 0 and RetryAfter the rest
	// of the wait. Kept in the key's value as BlockFor is, so every call
	// on a key must give the same; 0, the default, is none.
	MinInterval time.Duration
}

// capacity is the quota a decision is made against: Burst for a token
// bucket that sets one, else Limit.
func (r Rule) capacity() int64 {
	if r.Algorithm == TokenBucket && r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// Result is the outcome of one Take.
type Result struct {
	// Allowed reports whether the request was admitted and counted.
	Allowed bool
	// Limit is the quota decided against: Limit, or Burst for the bucket.
	Limit int64
	// Remaining is how many requests of cost 1 would be admitted now.
	Remaining int64
	// ResetAfter is the time until the quota is fully back; for SlidingLog,
	// until the oldest counted unit leaves the window.
	ResetAfter time.Duration
	// RetryAfter is zero when allowed; when rejected, the time until the
	// same request would be admitted, or Never.
	RetryAfter time.Duration
	// CountedIn says where an admitted cost was counted; pass it to Refund.
	CountedIn int64
}

// Never is the RetryAfter of a request whose cost exceeds the limit.
const Never = time.Duration(1<<63 - 1)
