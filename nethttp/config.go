package nethttp

import (
	"net/http"
	"time"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
)

// Config defines the limiter. Its fields are those of the Fiber
// middlewares of this module, in net/http's terms, with a go-redis client
// (Redis) in place of a fiber.Storage; package quota's Config documents
// the engine's settings in full. An invalid value makes New panic with a
// message that names the field.
type Config struct {
	// Algorithm decides under each limit: FixedWindow, SlidingWindow,
	// TokenBucket or SlidingLog, as docs/algorithms.md compares them.
	//
	// Optional. Default: FixedWindow
	Algorithm Algorithm

	// Next skips the limiter for a request when it returns true: the
	// request is neither counted nor given rate-limit headers.
	//
	// Optional. Default: nil
	Next func(r *http.Request) bool

	// Max is the number of requests (units of Cost) a key may make per
	// Expiration; for TokenBucket, the refill rate. 0 to 2^32-1, and for
	// SlidingLog at most 10,000, of all Limits together (and no MaxFunc).
	//
	// Optional. Default: 5
	Max int

	// MaxFunc, when set, returns Max for each request instead of the Max
	// field: 0 means no limit for that request, below 0 rejects it
	// (LimitReached, no Retry-After). See quota.Config.VaryMax.
	//
	// Optional. Default: nil
	MaxFunc func(r *http.Request) int

	// Expiration is the window's length (for TokenBucket, the time in
	// which Max tokens refill), from 1 ms.
	//
	// Optional. Default: 1 * time.Minute
	Expiration time.Duration

	// KeyGenerator returns the key a request is counted under. The default
	// is the client's address from r.RemoteAddr, an IPv6 client keyed by
	// its network (see IPv6Prefix). Behind a proxy, RemoteAddr is the
	// proxy's: key by the address your proxy puts in a header instead.
	//
	// Optional. Default: the client address, IPv6 by its /64 network
	KeyGenerator func(r *http.Request) string

	// LimitReached answers a rejected request, after the rate-limit
	// headers and Retry-After are set.
	//
	// Optional. Default: 429 Too Many Requests
	LimitReached http.Handler

	// SkipFailedRequests gives back the cost of requests whose response
	// status is 400 or above, counted first and credited when the handler
	// writes its status. A handler that panics before it writes its
	// status counts as failed (500), whether or not a middleware in front
	// recovers.
	//
	// Optional. Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back the cost of requests whose
	// response status is below 400. A request whose handler takes the
	// connection over (Hijack, as a WebSocket upgrade does) stays counted:
	// the status it then sends is not seen.
	//
	// Optional. Default: false
	SkipSuccessfulRequests bool

	// DisableHeaders sends no rate-limit header at all, as in Fiber:
	// Retry-After neither (Headers: HeadersNone keeps Retry-After on a
	// rejection).
	//
	// Optional. Default: false
	DisableHeaders bool

	// Redis, when set, keeps every key's state in Redis (a plain, Sentinel
	// failover, Cluster or Ring client), decided by atomic Lua scripts: any
	// number of replicas sharing it admit exactly the limit between them. See
	// docs/redis.md.
	//
	// Optional. Default: nil (state in this process, or in Storage)
	Redis goredis.UniversalClient

	// Storage, when set and Redis is not, keeps state in a key-value store. A
	// go-redis one (with a Conn method, as gofiber/storage/redis/v3 and this
	// module's storage/redis have) is used as Redis is; any other is exact for
	// one process, not across replicas.
	//
	// Optional. Default: nil
	Storage Storage

	// Burst is TokenBucket's capacity; 0 means Max.
	//
	// Optional. Default: 0 (Max)
	Burst int

	// Cost returns how many units a request takes (>= 0; a negative
	// result answers 500).
	//
	// Optional. Default: 1 per request
	Cost func(r *http.Request) int

	// KeyPrefix begins every key the limiter keeps in Redis or Storage.
	//
	// Optional. Default: "limiter:"
	KeyPrefix string

	// IPv6Prefix is the network, in bits, an IPv6 client is keyed by with
	// the default KeyGenerator: 1 to 128 (each address on its own), or 0
	// for the default.
	//
	// Optional. Default: 64
	IPv6Prefix int

	// Name tells apart limiters that share Redis or Storage with the same
	// algorithm and windows; see quota.Config.Name.
	//
	// Optional. Default: ""
	Name string

	// Limits are several limits decided together, such as 10 per second
	// and 1000 per hour (quota.Config.Limits). Up to 4; Max, Expiration, Burst
	// and MaxFunc are then left unset.
	//
	// Optional. Default: nil (Max per Expiration)
	Limits []Limit

	// Headers chooses the rate-limit headers, as HeaderMode says.
	//
	// Optional. Default: HeadersXRateLimit
	Headers HeaderMode

	// PolicyName names the policy in the IETF fields.
	//
	// Optional. Default: "default"
	PolicyName string

	// HeaderPartitionKey adds the key, base64, to the IETF fields as pk (a
	// key longer than 64 bytes as its SHA-256 digest).
	//
	// Optional. Default: false
	HeaderPartitionKey bool

	// DryRun decides and reports every request, and sends the headers,
	// but rejects none.
	//
	// Optional. Default: false
	DryRun bool

	// OnDecision, when set, is called with every decision, on the request's
	// goroutine.
	//
	// Optional. Default: nil
	OnDecision func(r *http.Request, e DecisionEvent)

	// MinInterval, when above 0, spaces a client's admitted requests by at
	// least this much; see quota.Config.MinInterval.
	//
	// Optional. Default: 0 (none)
	MinInterval time.Duration

	// Lease, when above 0 and Redis is set, lets each replica decide a busy
	// client's requests from a share of its quota, kept for at most Lease
	// (900 ms at most),
	// instead of a Redis call per request; see quota.Config.Lease.
	//
	// Optional. Default: 0 (a Redis call per request)
	Lease time.Duration

	// MaxDelay, when above 0, makes a request whose turn comes within
	// MaxDelay wait for it instead of getting 429, its turn counted at once
	// (exact across replicas); a waiter whose client goes away gives its
	// turn back. At most a minute, or the shortest limit's Expiration if
	// longer; not with MaxFunc, IdempotencyKey, Lease, BlockFor or
	// MinInterval (New panics). See quota.Limiter.Reserve.
	//
	// Optional. Default: 0 (429 at once)
	MaxDelay time.Duration

	// MaxWaiting bounds the requests that wait for their turn at once in
	// this process; past it, MaxDelay is 0 for a request.
	//
	// Optional. Default: 1024
	MaxWaiting int

	// BlockFor, when above 0, rejects a client's requests for this long
	// after one is rejected; see quota.Config.BlockFor.
	//
	// Optional. Default: 0 (none)
	BlockFor time.Duration

	// IdempotencyKey, when set, names each request for its retries, as
	// IdempotencyKeyHeader does: a retry of an admitted request within
	// IdempotencyTTL is answered with its first decision and counts nothing,
	// but reaches the handler, so it is no guard for requests whose repeats
	// are the thing to limit. Not with MaxFunc: New panics. See
	// quota.Limiter.TakeIdempotent.
	//
	// Optional. Default: nil (none)
	IdempotencyKey func(r *http.Request) string

	// IdempotencyTTL bounds how long a first decision answers its retries;
	// see quota.Config.IdempotencyTTL.
	//
	// Optional. Default: 1 hour
	IdempotencyTTL time.Duration

	// IdempotencyKeys bounds the first decisions kept in this process; see
	// quota.Config.IdempotencyKeys.
	//
	// Optional. Default: 8192
	IdempotencyKeys int

	// MaxKeys bounds the keys kept in memory; see quota.Config.MaxKeys.
	//
	// Optional. Default: 1 << 20
	MaxKeys int

	// FailurePolicy says what happens to a request when Redis or Storage
	// fails: FailFallback, FailOpen, FailClosed or FailError (a 500), as
	// docs/failure-handling.md tells (a Redis call that timed out is
	// answered 429 until the breaker opens: Redis may still count it).
	//
	// Optional. Default: FailFallback
	FailurePolicy FailurePolicy

	// StorageTimeout bounds each Redis or Storage call; a slower call is a
	// failure, decided by FailurePolicy. 0 (the default) or at least 1 ms.
	//
	// Optional. Default: 100 * time.Millisecond
	StorageTimeout time.Duration

	// BreakerFailures is how many calls in a row must fail for the breaker
	// to open. 0 (the default) to 2^31-1.
	//
	// Optional. Default: 5
	BreakerFailures int

	// BreakerCooldown is how long the breaker stays open before it
	// probes, and between probes. 0 (the default) or at least 1 ms.
	//
	// Optional. Default: 500 * time.Millisecond
	BreakerCooldown time.Duration

	// OnStorageError receives failed calls as a *StorageError, at most one a
	// second, and warnings about the store's settings.
	//
	// Optional. Default: nil (failures and warnings go to the standard logger)
	OnStorageError func(err error)

	// DenyCacheKeys is how many rejected keys this process remembers, so
	// that the same request is rejected here until its Retry-After
	// without a call. 0 (the default) to 2^24.
	//
	// Optional. Default: 8192
	DenyCacheKeys int

	// DisableDenyCache turns the deny cache off.
	//
	// Optional. Default: false
	DisableDenyCache bool

	clock func() int64 // tests: the clock in ms
}

// Limit is one of several limits (Config.Limits).
type Limit struct {
	// Max is the number of units per Expiration: 1 to 2^32-1.
	Max int
	// Expiration is the window's length, at least 1 ms.
	Expiration time.Duration
	// Burst is TokenBucket's capacity; 0 means Max.
	Burst int
	// PolicyName names this limit in the IETF fields.
	PolicyName string
}

// IdempotencyKeyHeader is an IdempotencyKey: the request's
// Idempotency-Key header, or "" when it has none.
func IdempotencyKeyHeader(r *http.Request) string {
	return r.Header.Get("Idempotency-Key")
}

// The engine's names that a Config and its hooks use, so that they need
// no other import. Package quota documents each in full.
type (
	// Algorithm chooses how a key's requests are counted
	// (Config.Algorithm): FixedWindow, the default, SlidingWindow,
	// TokenBucket or SlidingLog. docs/algorithms.md compares them.
	Algorithm = quota.Algorithm
	// FailurePolicy says what happens to a request while Redis or Storage
	// fails (Config.FailurePolicy): FailFallback, the default, decides it
	// in this process's memory; FailOpen admits it uncounted; FailClosed
	// answers 503; FailError answers 500.
	FailurePolicy = quota.FailurePolicy
	// HeaderMode chooses the rate-limit headers of a response
	// (Config.Headers): HeadersXRateLimit, the default (X-Ratelimit-Limit,
	// -Remaining and -Reset), HeadersIETF (RateLimit-Policy and
	// RateLimit), HeadersBoth, or HeadersNone. Retry-After goes with every
	// rejection that can succeed later.
	HeaderMode = headers.Mode
	// DecisionEvent describes one decision, for Config.OnDecision.
	DecisionEvent = quota.DecisionEvent
	// Source says what answered a decision (DecisionEvent.Source).
	Source = quota.Source
	// StorageError is what Config.OnStorageError receives.
	StorageError = quota.StorageError
	// Storage is any store with Fiber's Get, Set and Delete, for
	// Config.Storage; one that also has Conn() (a go-redis client) is
	// decided by Redis's Lua scripts, atomically.
	Storage = quota.Storage
)

// The values of the types above.
const (
	FixedWindow   Algorithm = quota.FixedWindow
	SlidingWindow Algorithm = quota.SlidingWindow
	TokenBucket   Algorithm = quota.TokenBucket
	SlidingLog    Algorithm = quota.SlidingLog

	FailFallback FailurePolicy = quota.FailFallback
	FailOpen     FailurePolicy = quota.FailOpen
	FailClosed   FailurePolicy = quota.FailClosed
	FailError    FailurePolicy = quota.FailError

	HeadersXRateLimit HeaderMode = headers.XRateLimit
	HeadersIETF       HeaderMode = headers.IETF
	HeadersBoth       HeaderMode = headers.Both
	HeadersNone       HeaderMode = headers.None

	SourceBackend    Source = quota.SourceBackend
	SourceDenyCache  Source = quota.SourceDenyCache
	SourceFallback   Source = quota.SourceFallback
	SourceFailOpen   Source = quota.SourceFailOpen
	SourceFailClosed Source = quota.SourceFailClosed
	SourceRepeat     Source = quota.SourceRepeat
	SourceLease      Source = quota.SourceLease
)

// Never is DecisionEvent.RetryAfter for a request that can never be
// admitted: its cost exceeds the limit (or the token bucket's Burst).
const Never = quota.Never

var (
	// ErrStorageTimeout is the error of a call that did not answer within
	// Config.StorageTimeout.
	ErrStorageTimeout = quota.ErrStorageTimeout
	// ErrStorageEvicts is wrapped by the warning about a Redis that may
	// evict the limiter's keys at its memory limit.
	ErrStorageEvicts = quota.ErrStorageEvicts
)
