package limiter

import "github.com/fiberlimit/limiter/quota"

// The deciding core is package quota, which knows nothing of Fiber; these
// are its types under the names this package has always given them.

// Never is DecisionEvent.RetryAfter for a request that can never be
// admitted, because its cost is larger than the limit (or the token
// bucket's Burst). No Retry-After header is sent for such a request. It is
// the longest time.Duration, and the same value as quota.Never and
// storage/redis.Never.
const Never = quota.Never

// FailurePolicy says what the limiter does with a request when its Storage
// fails or the breaker keeps requests off it (Config.FailurePolicy).
type FailurePolicy = quota.FailurePolicy

const (
	// FailFallback decides the request with an in-memory limiter of this
	// replica, with the same rule and key. It keeps limiting while Storage
	// is down, each replica on its own: N replicas admit up to N times the
	// limit between them. Its headers are those of the local decision. The
	// default.
	FailFallback = quota.FailFallback
	// FailOpen admits the request, uncounted and without rate-limit headers.
	FailOpen = quota.FailOpen
	// FailClosed rejects the request with 503 Service Unavailable and a
	// Retry-After of the breaker's cool-down (at least 1 s), without
	// rate-limit headers.
	FailClosed = quota.FailClosed
)

// StorageError is what Config.OnStorageError receives: a report of failed
// storage calls, or (with Failures 0) a warning about the storage's
// settings, such as one wrapping ErrStorageEvicts.
type StorageError = quota.StorageError

// ErrStorageTimeout is the error of a Storage call that did not answer
// within Config.StorageTimeout.
var ErrStorageTimeout = quota.ErrStorageTimeout

// ErrStorageEvicts is wrapped by the warning that Config.OnStorageError
// gets (or the standard logger, without a hook) when a Redis that holds the
// limiter's keys is set to evict keys at its memory limit (see
// quota.ErrStorageEvicts).
var ErrStorageEvicts = quota.ErrStorageEvicts

// DecisionEvent describes one rate-limit decision, for Config.OnDecision.
type DecisionEvent = quota.DecisionEvent

// DecisionSource says what answered a decision.
type DecisionSource = quota.Source

const (
	// SourceBackend: the in-memory manager, or Storage.
	SourceBackend = quota.SourceBackend
	// SourceDenyCache: an earlier rejection by Storage, remembered on
	// this replica until its RetryAfter.
	SourceDenyCache = quota.SourceDenyCache
	// SourceFallback: FailFallback's in-memory limiter, Storage failing,
	// or its rejection of a take whose Redis call timed out.
	SourceFallback = quota.SourceFallback
	// SourceFailOpen: FailOpen admitted the request uncounted, Storage
	// failing.
	SourceFailOpen = quota.SourceFailOpen
	// SourceFailClosed: FailClosed rejected the request with 503, Storage
	// failing.
	SourceFailClosed = quota.SourceFailClosed
	// SourceRepeat: a repeat of a request (IdempotencyKey), answered with
	// its first decision; nothing was counted.
	SourceRepeat = quota.SourceRepeat
)
