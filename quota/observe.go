package quota

import (
	"strconv"
	"time"
)

// DecisionEvent describes one rate-limit decision of a middleware of this
// module (Fiber v2, Fiber v3, net/http), for its Config.OnDecision. It is
// passed by value and holds nothing the hook must release.
type DecisionEvent struct {
	// Name is the limiter's Config.Name ("" when unset), which tells
	// apart the limiters of one app in metrics.
	Name string
	// Key is the limited key. It may point into the request's buffers:
	// copy it (strings.Clone) to keep it past the call.
	Key string
	// Allowed reports whether the request was admitted. With DryRun, false
	// means it would have been rejected; it went on all the same.
	Allowed bool
	// DryRun is Config.DryRun.
	DryRun bool
	// Limit is the quota decided against: Max (or the adapter's MaxFunc's result) for the
	// windows, the bucket's Burst for TokenBucket. With several Limits,
	// Limit, Remaining and Expiration describe the most restrictive one, as
	// the X-RateLimit headers do.
	Limit int
	// Remaining is how many requests of cost 1 would still be admitted
	// right now. It is 0 when Source is SourceFailOpen or SourceFailClosed.
	Remaining int
	// Expiration is the window of the limit that Limit describes.
	Expiration time.Duration
	// Cost is the request's cost (the middleware Config's Cost, 1 by default).
	Cost int
	// RetryAfter is zero for an admitted request; for a rejected one, the
	// time until the same request would be admitted (by every limit), or
	// Never.
	RetryAfter time.Duration
	// Algorithm is "fixed_window", "sliding_window", "token_bucket" or
	// "sliding_log"; "concurrency" for a Concurrency's slots, whose Limit
	// is Max and Remaining the key's free slots.
	Algorithm string
	// Backend is "memory" (the in-memory manager), "redis" (the atomic
	// Lua store) or "storage" (another Storage).
	Backend string
	// Source says what answered: the backend, the deny cache, or, while
	// Storage fails, the failure policy.
	Source Source
	// Latency is how long the decision took, from the call to the backend
	// to its answer.
	Latency time.Duration
}

// Fallback reports whether the failure policy answered instead of the
// backend, because Storage failed or its breaker was open.
func (e DecisionEvent) Fallback() bool {
	return e.Source == SourceFallback || e.Source == SourceFailOpen || e.Source == SourceFailClosed
}

// Source says what answered a decision.
type Source uint8

const (
	// SourceBackend: the limiter's own state, in memory, Redis or
	// Storage.
	SourceBackend Source = iota
	// SourceDenyCache: an earlier rejection by Storage, remembered on
	// this replica until its RetryAfter.
	SourceDenyCache
	// SourceFallback: FailFallback's in-memory limiter, Storage failing,
	// or its rejection of a take whose Redis call timed out.
	SourceFallback
	// SourceFailOpen: FailOpen admitted the request uncounted, Storage
	// failing.
	SourceFailOpen
	// SourceFailClosed: FailClosed rejected the request with 503, Storage
	// failing.
	SourceFailClosed
	// SourceRepeat: a repeat of a request (TakeIdempotent's id), answered with
	// its first take's Result; nothing was counted.
	SourceRepeat
	// SourceLease: this replica's lease of the key's quota (Config.Lease):
	// an admission from the share it took from the store, or a rejection
	// while the store's last answer for the key stands.
	SourceLease
)

// String returns "backend", "deny_cache", "fallback", "fail_open",
// "fail_closed", "repeat" or "lease", suitable as a metric label.
func (s Source) String() string {
	switch s {
	case SourceBackend:
		return "backend"
	case SourceDenyCache:
		return "deny_cache"
	case SourceFallback:
		return "fallback"
	case SourceFailOpen:
		return "fail_open"
	case SourceFailClosed:
		return "fail_closed"
	case SourceRepeat:
		return "repeat"
	case SourceLease:
		return "lease"
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// String returns "fixed_window", "sliding_window", "token_bucket" or
// "sliding_log".
func (a Algorithm) String() string {
	switch a {
	case FixedWindow:
		return "fixed_window"
	case SlidingWindow:
		return "sliding_window"
	case TokenBucket:
		return "token_bucket"
	case SlidingLog:
		return "sliding_log"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}
