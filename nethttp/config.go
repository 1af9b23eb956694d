package nethttp

import (
	"net/http"
	"time"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
)

// Config defines the limiter. Its fields are those of the Fiber
// middlewares of this module, in net/http's terms. An invalid value makes
// New panic with a message that names the field.
type Config struct {
	// Algorithm decides under each limit: quota.FixedWindow,
	// quota.SlidingWindow, quota.TokenBucket or quota.SlidingLog.
	//
	// Optional. Default: quota.FixedWindow
	Algorithm quota.Algorithm

	// Next skips the limiter for a request when it returns true: the
	// request is neither counted nor given rate-limit headers.
	//
	// Optional. Default: nil
	Next func(r *http.Request) bool

	// Max is the number of requests (units of Cost) a key may make per
	// Expiration; for TokenBucket, the refill rate. 0 to 2^32-1, and for
	// quota.SlidingLog at most 10,000, of all Limits together (and no
	// MaxFunc).
	//
	// Optional. Default: 5
	Max int

	// MaxFunc, when set, returns Max for each request instead of the Max
	// field; a result <= 0 means no limit for that request.
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

	// DisableHeaders sends no rate-limit headers (Retry-After still goes
	// with a rejection). Headers: HeadersNone means the same.
	//
	// Optional. Default: false
	DisableHeaders bool

	// Redis, when set, keeps every key's state in Redis through atomic Lua
	// scripts: any number of replicas sharing it admit exactly the limit
	// between them (a plain, Sentinel failover, Cluster or Ring client).
	//
	// Optional. Default: nil (state in this process, or in Storage)
	Redis goredis.UniversalClient

	// Storage, when set and Redis is not, keeps state in a key-value
	// store. One on go-redis (the *Storage of gofiber/storage/redis/v3,
	// this module's storage/redis Store) is used as Redis is; any other is
	// read, decided and written back under a lock of this process: exact
	// for one process, not across replicas.
	//
	// Optional. Default: nil
	Storage quota.Storage

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
	// algorithm and windows: each must have its own, or the same Name to
	// share one count.
	//
	// Optional. Default: ""
	Name string

	// Limits are several limits decided together, such as 10 per second
	// and 1000 per hour. Up to 4; Max, Expiration, Burst and MaxFunc are
	// then left unset.
	//
	// Optional. Default: nil (Max per Expiration)
	Limits []Limit

	// Headers chooses the rate-limit headers.
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

	// OnDecision, when set, is called with every decision.
	//
	// Optional. Default: nil
	OnDecision func(r *http.Request, e quota.DecisionEvent)

	// MinInterval, when above 0, is the least time between two admitted
	// requests of a client: "and no two requests closer than 200 ms". One
	// that comes sooner gets 429 with Retry-After the rest of the wait, and
	// counts nothing. On Redis every replica keeps it. At most a year.
	//
	// Optional. Default: 0 (none)
	MinInterval time.Duration

	// BlockFor, when above 0, holds off a client that the limiter rejected
	// (for a request that could be admitted later) for this long after the
	// rejection, whatever its counts: its requests get 429 with Retry-After
	// the rest of the block. On Redis every replica holds it off. At most a
	// year.
	//
	// Optional. Default: 0 (none)
	BlockFor time.Duration

	// IdempotencyKey, when set, names each request for its retries (the
	// HTTP Idempotency-Key header: IdempotencyKeyHeader): a request whose
	// key and IdempotencyKey repeat an admitted one within IdempotencyTTL
	// gets its decision again, with the same status and headers, and
	// counts nothing, up to 8 repeats (the next counts as a new request).
	// The handler runs for every repeat: the limiter keeps decisions, not
	// responses. A rejected request's retry is decided afresh (it counted
	// nothing), and so is the retry of one whose cost Skip*Requests gave
	// back, or one of a larger Cost. Since every repeat runs the handler,
	// do not name requests whose repeats are what is to be limited (login
	// attempts). "" counts the request as usual. On Redis the check and the
	// count are one script call, exact across replicas; in memory and
	// other Storage the decisions are kept in this process
	// (IdempotencyKeys). Not with MaxFunc: New panics.
	//
	// Optional. Default: nil (none)
	IdempotencyKey func(r *http.Request) string

	// IdempotencyTTL is how long a request's decision is kept for its
	// repeats (see IdempotencyKey), at most 365 days.
	//
	// Optional. Default: 1 hour
	IdempotencyTTL time.Duration

	// IdempotencyKeys bounds the decisions kept for repeats in this
	// process (in memory and other Storage; Redis keeps its own, each for
	// IdempotencyTTL), about 400 bytes each: past it the oldest go. At
	// most 2^24.
	//
	// Optional. Default: 8192
	IdempotencyKeys int

	// MaxKeys bounds the keys kept in memory; under quota.SlidingLog, so
	// do 256 MiB of logs.
	//
	// Optional. Default: 1 << 20
	MaxKeys int

	// FailurePolicy says what happens to a request when Redis or Storage
	// fails: quota.FailFallback, quota.FailOpen or quota.FailClosed. Under
	// FailFallback a Redis call that timed out is rejected (429) until the
	// breaker opens: Redis may still count it.
	//
	// Optional. Default: quota.FailFallback
	FailurePolicy quota.FailurePolicy

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

	// OnStorageError receives failed calls as a *quota.StorageError, at
	// most one a second, and warnings about the store's settings.
	//
	// Optional. Default: nil (warnings go to the standard logger)
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

// HeaderMode chooses which rate-limit headers a response carries.
// Retry-After is sent with every rejection that can succeed later, in every
// mode.
type HeaderMode = headers.Mode

const (
	// HeadersXRateLimit sends X-Ratelimit-Limit, X-Ratelimit-Remaining and
	// X-Ratelimit-Reset (so spelled on the wire). The default.
	HeadersXRateLimit = headers.XRateLimit
	// HeadersIETF sends RateLimit-Policy and RateLimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-10.
	HeadersIETF = headers.IETF
	// HeadersBoth sends both sets.
	HeadersBoth = headers.Both
	// HeadersNone sends no rate-limit headers.
	HeadersNone = headers.None
)

// IdempotencyKeyHeader is an IdempotencyKey: the request's
// Idempotency-Key header, or "" when it has none.
func IdempotencyKeyHeader(r *http.Request) string {
	return r.Header.Get("Idempotency-Key")
}
