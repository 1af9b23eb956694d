package limiter

import (
	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
)

// The deciding core is package quota, which knows nothing of Fiber; these
// are its types under the names the Fiber v2 middleware gives them.

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
	// replica, with the same rule and key: N replicas admit up to N times
	// the limit between them while Storage is down. The default.
	FailFallback = quota.FailFallback
	// FailOpen admits the request, uncounted and without rate-limit headers.
	FailOpen = quota.FailOpen
	// FailClosed rejects the request with 503 Service Unavailable and a
	// Retry-After of the breaker's cool-down (at least 1 s).
	FailClosed = quota.FailClosed
)

// StorageError is what Config.OnStorageError receives: a report of failed
// storage calls, or (with Failures 0) a warning about the storage's
// settings, such as one wrapping ErrStorageEvicts.
type StorageError = quota.StorageError

// ErrStorageTimeout is the error of a Storage call that did not answer
// within Config.StorageTimeout.
var ErrStorageTimeout = quota.ErrStorageTimeout

// ErrStorageEvicts is wrapped by the warning that a Redis holding the
// limiter's keys may evict them (see quota.ErrStorageEvicts).
var ErrStorageEvicts = quota.ErrStorageEvicts

// DecisionEvent describes one rate-limit decision, for Config.OnDecision.
type DecisionEvent = quota.DecisionEvent

// DecisionSource says what answered a decision.
type DecisionSource = quota.Source

const (
	// SourceBackend: the limiter's state, in memory or in Storage.
	SourceBackend = quota.SourceBackend
	// SourceDenyCache: an earlier rejection by Storage, remembered on
	// this replica until its RetryAfter.
	SourceDenyCache = quota.SourceDenyCache
	// SourceFallback: FailFallback's in-memory limiter, Storage failing,
	// or its rejection of a take whose Redis call timed out.
	SourceFallback = quota.SourceFallback
	// SourceFailOpen: FailOpen admitted the request, Storage failing.
	SourceFailOpen = quota.SourceFailOpen
	// SourceFailClosed: FailClosed rejected it with 503, Storage failing.
	SourceFailClosed = quota.SourceFailClosed
	// SourceRepeat: a repeat of a request (IdempotencyKey), answered with
	// its first decision; nothing was counted.
	SourceRepeat = quota.SourceRepeat
)

// HeaderMode chooses which rate-limit headers a response carries.
// Retry-After is sent with every rejection that can succeed later, in every
// mode.
type HeaderMode = headers.Mode

const (
	// HeadersXRateLimit sends X-Ratelimit-Limit, X-Ratelimit-Remaining and
	// X-Ratelimit-Reset (so spelled on the wire), as Fiber's limiter does.
	// The default.
	HeadersXRateLimit = headers.XRateLimit
	// HeadersIETF sends RateLimit-Policy and RateLimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-10.
	HeadersIETF = headers.IETF
	// HeadersBoth sends both sets.
	HeadersBoth = headers.Both
	// HeadersNone sends no rate-limit headers (Retry-After still goes with
	// a rejection).
	HeadersNone = headers.None
)
