package limiter

import (
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	rlheaders "github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// Config defines the limiter. Its first fields are those of Fiber v3's own
// middleware/limiter, by the same names, types and defaults, so that a
// Fiber v3 config compiles after changing only the import path; the
// fields after DisableValueRedaction are this limiter's own, and
// docs/migration.md ("From Fiber v3") says what behaves differently. An
// invalid value makes New panic with a message that names the field.
type Config struct {
	// Storage keeps the limiter's state: nil, in this process. A Redis storage
	// (one with a Conn method, as gofiber/storage/redis/v3 has) is decided by
	// atomic Lua scripts, exact across replicas, where Fiber v3 gets and sets
	// under a process mutex; any other fiber.Storage is exact within one
	// process only. See docs/redis.md.
	//
	// Optional. Default: nil (in this process's memory)
	Storage fiber.Storage

	// LimiterMiddleware chooses the algorithm: FixedWindow{},
	// SlidingWindow{}, TokenBucket{} or SlidingLog{} (docs/algorithms.md).
	//
	// Optional. Default: FixedWindow{}
	LimiterMiddleware Handler

	// Next skips the limiter for a request when it returns true: the
	// request is neither counted nor given rate-limit headers.
	//
	// Optional. Default: nil
	Next func(c fiber.Ctx) bool

	// MaxFunc, when set, returns Max for each request (a plan, an API key).
	// As in Fiber v3, a result of 0 leaves the request unlimited and one
	// below 0 rejects it (LimitReached, no Retry-After); one above 2^32-1
	// counts as 2^32-1. Unset, or left at
	// ConfigDefault.MaxFunc, it stands for Max: New fills in a function that
	// returns Max before it calls LimiterMiddleware.New, as Fiber v3 does.
	//
	// Optional. Default: a function that returns Max
	MaxFunc func(c fiber.Ctx) int

	// ExpirationFunc, when set, returns Expiration for each request, to the
	// millisecond; a result <= 0 means Expiration. A key is counted apart
	// under each window, so the results must come from a fixed set (one per
	// plan or route): one that changes per request, such as the time left to
	// a deadline, limits nothing. Unset, New fills it in as MaxFunc.
	//
	// Optional. Default: a function that returns Expiration
	ExpirationFunc func(c fiber.Ctx) time.Duration

	// KeyGenerator returns the key a request is counted under. The default
	// is the client's address, c.IP(), with an IPv6 client keyed by its
	// network (see IPv6Prefix). A key from the request (c.Get, c.Params)
	// needs no copy: the limiter copies what it keeps.
	//
	// Optional. Default: the client address, IPv6 by its /64 network
	KeyGenerator func(fiber.Ctx) string

	// LimitReached answers a rejected request, after the rate-limit
	// headers and Retry-After are set.
	//
	// Optional. Default: 429 Too Many Requests
	LimitReached fiber.Handler

	// Max is the number of requests (units of Cost) a key may make per
	// Expiration; for TokenBucket, the refill rate. 0 to 2^32-1, and for
	// SlidingLog at most 10,000, of all Limits together (and no MaxFunc).
	//
	// Optional. Default: 5
	Max int

	// Expiration is the window's length (for TokenBucket, the time in
	// which Max tokens refill), from 1 ms: windows shorter than a second
	// work, and are not rounded to a second.
	//
	// Optional. Default: 1 * time.Minute
	Expiration time.Duration

	// SkipFailedRequests gives back the cost of requests whose response
	// status is 400 or above (a returned *fiber.Error by its code, any
	// other error as 500). The request is counted first, so concurrent
	// requests cannot all slip through, then credited in the window it
	// was counted in.
	//
	// Optional. Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back the cost of requests whose
	// response status is below 400, as SkipFailedRequests does.
	//
	// Optional. Default: false
	SkipSuccessfulRequests bool

	// DisableHeaders sends no rate-limit header at all, as in Fiber:
	// Retry-After neither (Headers: HeadersNone keeps Retry-After on a
	// rejection).
	//
	// Optional. Default: false
	DisableHeaders bool

	// DisableValueRedaction shows the key in the errors the limiter hands
	// to Fiber's error handler (FailError's storage errors); by default it
	// is "[redacted]", as in Fiber.
	//
	// Optional. Default: false
	DisableValueRedaction bool

	// Burst is TokenBucket's capacity; 0 means Max. The windows take none.
	//
	// Optional. Default: 0 (Max)
	Burst int

	// Cost returns how many units a request takes (>= 0; a negative
	// result fails the request with an error).
	//
	// Optional. Default: 1 per request
	Cost func(c fiber.Ctx) int

	// KeyPrefix begins every key the limiter keeps in Storage.
	//
	// Optional. Default: "limiter:"
	KeyPrefix string

	// IPv6Prefix is the network, in bits, an IPv6 client is keyed by with
	// the default KeyGenerator: 1 to 128 (each address on its own), or 0
	// for the default.
	//
	// Optional. Default: 64
	IPv6Prefix int

	// Name tells apart limiters that share a Storage with the same
	// algorithm and windows (one per route, say): each must have its own, or
	// the same Name to share one count. It holds no ':', '{' or '}'. See
	// docs/algorithms.md, "Several limits, several limiters".
	//
	// Optional. Default: ""
	Name string

	// Limits are several limits decided together, such as 10 per second
	// and 1000 per hour: a request any limit rejects is counted under
	// none. Up to 4, each with its own Expiration; Max, Expiration,
	// Burst, MaxFunc and ExpirationFunc are then left unset.
	//
	// Optional. Default: nil (Max per Expiration)
	Limits []Limit

	// Headers chooses the rate-limit headers: HeadersXRateLimit,
	// HeadersIETF, HeadersBoth or HeadersNone (docs/headers.md).
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

	// OnDecision, when set, is called with every decision (a DecisionEvent),
	// for logs and metrics.
	//
	// Optional. Default: nil
	OnDecision func(c fiber.Ctx, e DecisionEvent)

	// MinInterval is the least time between two admitted requests of a
	// client, at most a year (quota.Config.MinInterval).
	//
	// Optional. Default: 0 (none)
	MinInterval time.Duration

	// Lease lets each replica decide a busy client's requests from a share
	// of its quota in Redis, kept for at most Lease (900 ms at most),
	// instead of a call per request; never more than the limit across replicas
	// (quota.Config.Lease, docs/leases.md).
	//
	// Optional. Default: 0 (a Redis call per request)
	Lease time.Duration

	// MaxDelay, when above 0, makes a request whose turn comes within
	// MaxDelay wait for it instead of getting 429, its turn counted at once
	// (exact across replicas); a waiter whose request ends gives its turn
	// back. At most a minute, or the shortest limit's Expiration if longer;
	// not with MaxFunc, ExpirationFunc, IdempotencyKey, Lease, BlockFor or
	// MinInterval (New panics). See quota.Limiter.Reserve.
	//
	// Optional. Default: 0 (429 at once)
	MaxDelay time.Duration

	// MaxWaiting bounds the requests that wait for their turn at once in
	// this process; past it, MaxDelay is 0 for a request.
	//
	// Optional. Default: 1024
	MaxWaiting int

	// BlockFor holds a client off for this long after a rejection, at most a
	// year (quota.Config.BlockFor).
	//
	// Optional. Default: 0 (none)
	BlockFor time.Duration

	// IdempotencyKey names a request for its retries (IdempotencyKeyHeader
	// reads its Idempotency-Key header): a repeat of an admitted request within
	// IdempotencyTTL gets the same decision and counts nothing, yet runs the
	// handler, so leave out requests whose repeats are to be limited (logins).
	// Not with MaxFunc or ExpirationFunc of your own: New panics. See
	// quota.Limiter.TakeIdempotent.
	//
	// Optional. Default: nil (none)
	IdempotencyKey func(c fiber.Ctx) string

	// IdempotencyTTL is how long a decision is kept for its repeats, at
	// most 365 days.
	//
	// Optional. Default: 1 hour
	IdempotencyTTL time.Duration

	// IdempotencyKeys bounds the decisions this process keeps for repeats
	// (quota.Config.IdempotencyKeys).
	//
	// Optional. Default: 8192
	IdempotencyKeys int

	// MaxKeys bounds the keys this process keeps in memory (without Storage,
	// or FailFallback's); see quota.Config.MaxKeys.
	//
	// Optional. Default: 1 << 20
	MaxKeys int

	// FailurePolicy says what happens to a request when Storage fails or
	// its breaker is open (docs/failure-handling.md); FailError is Fiber's
	// behaviour, the storage's error to the error handler. Under FailFallback a
	// Redis call that timed out is rejected (429) until the breaker opens:
	// Redis may still count it.
	//
	// Optional. Default: FailFallback
	FailurePolicy FailurePolicy

	// StorageTimeout bounds each Storage call; a slower call is a failure,
	// decided by FailurePolicy. 0 (the default) or at least 1 ms.
	//
	// Optional. Default: 100 * time.Millisecond
	StorageTimeout time.Duration

	// BreakerFailures is how many Storage calls in a row must fail for the
	// breaker to open. 0 (the default) to 2^31-1.
	//
	// Optional. Default: 5
	BreakerFailures int

	// BreakerCooldown is how long the breaker stays open before it
	// probes, and between probes. 0 (the default) or at least 1 ms.
	//
	// Optional. Default: 500 * time.Millisecond
	BreakerCooldown time.Duration

	// OnStorageError receives failed Storage calls as a *StorageError, at
	// most one a second, and warnings about Storage's settings.
	//
	// Optional. Default: nil (failures and warnings go to the standard logger)
	OnStorageError func(err error)

	// DenyCacheKeys is how many rejected keys this process remembers, so
	// that the same request is rejected here until its Retry-After
	// without a Storage call. 0 (the default) to 2^24.
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
	// Max is the number of units per Expiration: 1 to 2^32-1, and for
	// SlidingLog at most 10,000 with the other limits' Max.
	Max int
	// Expiration is the window's length, at least 1 ms.
	Expiration time.Duration
	// Burst is TokenBucket's capacity; 0 means Max.
	Burst int
	// PolicyName names this limit in the IETF fields; by default the
	// limiter's PolicyName and the window ("default-1h").
	PolicyName string
}

// ConfigDefault is the config New uses when given none, and whose values
// fill the fields a config leaves unset; they are package quota's
// defaults, which also fill KeyPrefix, MaxKeys and the Storage settings.
var ConfigDefault = Config{
	Max:          quota.DefaultMax,
	Expiration:   quota.DefaultExpiration,
	MaxFunc:      maxOf(quota.DefaultMax),
	KeyGenerator: defaultKeyGenerator,
	LimitReached: func(c fiber.Ctx) error {
		return c.SendStatus(fiber.StatusTooManyRequests)
	},
	LimiterMiddleware: FixedWindow{},
}

// configDefault fills the fields of config left unset from ConfigDefault,
// and MaxFunc and ExpirationFunc, when they stand for Max and Expiration,
// with functions that return them.
func configDefault(config ...Config) Config {
	cfg := ConfigDefault
	if len(config) > 0 {
		cfg = config[0]
	}
	if len(cfg.Limits) > 0 {
		if (cfg.Max != 0 && cfg.Max != ConfigDefault.Max) || (cfg.Expiration != 0 && cfg.Expiration != ConfigDefault.Expiration) {
			panic(fmt.Sprintf("limiter: Limits is set, and so are Max (%d) or Expiration (%v); set each limit's Max and Expiration in Limits only", cfg.Max, cfg.Expiration))
		}
		cfg.Max, cfg.Expiration = 0, 0
	} else {
		if cfg.Max == 0 {
			cfg.Max = ConfigDefault.Max
		}
		if cfg.Expiration == 0 {
			cfg.Expiration = ConfigDefault.Expiration
		}
	}
	if cfg.KeyGenerator == nil {
		cfg.KeyGenerator = ConfigDefault.KeyGenerator
	}
	if cfg.LimitReached == nil {
		cfg.LimitReached = ConfigDefault.LimitReached
	}
	if cfg.LimiterMiddleware == nil {
		cfg.LimiterMiddleware = ConfigDefault.LimiterMiddleware
	} else if err := adapter.CheckMiddleware(cfg.LimiterMiddleware); err != nil {
		panic(err.Error())
	}
	if standsForMax(cfg.MaxFunc) {
		cfg.MaxFunc = maxOf(cfg.Max)
	}
	if standsForExpiration(cfg.ExpirationFunc) {
		cfg.ExpirationFunc = expirationOf(cfg.Expiration)
	}
	return cfg
}

// IdempotencyKeyHeader is an IdempotencyKey: the request's
// Idempotency-Key header (copied), or "" when it has none.
func IdempotencyKeyHeader(c fiber.Ctx) string {
	return string([]byte(c.Get("Idempotency-Key")))
}

// The engine's names that a Config and its hooks use, so that they need
// no other import. Package quota documents each in full.
type (
	// FailurePolicy says what happens to a request while Storage fails or
	// the breaker keeps requests off it (Config.FailurePolicy):
	// FailFallback, the default, decides it in this replica's memory (N
	// replicas then admit up to N times the limit); FailOpen admits it
	// uncounted; FailClosed answers 503 with a Retry-After of the
	// breaker's cool-down; FailError hands the storage's error to Fiber's
	// error handler. docs/failure-handling.md compares them.
	FailurePolicy = quota.FailurePolicy
	// HeaderMode chooses the rate-limit headers of a response
	// (Config.Headers): HeadersXRateLimit, the default and Fiber's
	// (X-Ratelimit-Limit, -Remaining and -Reset), HeadersIETF
	// (RateLimit-Policy and RateLimit, as in
	// draft-ietf-httpapi-ratelimit-headers-10), HeadersBoth, or
	// HeadersNone. Retry-After goes with every rejection that can succeed
	// later.
	HeaderMode = rlheaders.Mode
	// DecisionEvent describes one decision, for Config.OnDecision.
	DecisionEvent = quota.DecisionEvent
	// Source says what answered a decision (DecisionEvent.Source): the
	// backend, the deny cache, the fallback, FailOpen, FailClosed, or the
	// first decision of a repeated request.
	Source = quota.Source
	// StorageError is what Config.OnStorageError receives: a report of
	// failed storage calls, or, with Failures 0, a warning about the
	// storage's settings.
	StorageError = quota.StorageError
)

// The values of the types above.
const (
	FailFallback FailurePolicy = quota.FailFallback
	FailOpen     FailurePolicy = quota.FailOpen
	FailClosed   FailurePolicy = quota.FailClosed
	FailError    FailurePolicy = quota.FailError

	HeadersXRateLimit HeaderMode = rlheaders.XRateLimit
	HeadersIETF       HeaderMode = rlheaders.IETF
	HeadersBoth       HeaderMode = rlheaders.Both
	HeadersNone       HeaderMode = rlheaders.None

	SourceBackend    Source = quota.SourceBackend
	SourceDenyCache  Source = quota.SourceDenyCache
	SourceFallback   Source = quota.SourceFallback
	SourceFailOpen   Source = quota.SourceFailOpen
	SourceFailClosed Source = quota.SourceFailClosed
	SourceRepeat     Source = quota.SourceRepeat
	SourceLease      Source = quota.SourceLease
)

// Never is DecisionEvent.RetryAfter for a request that can never be
// admitted: its cost exceeds the limit (or the token bucket's Burst). No
// Retry-After header goes with it.
const Never = quota.Never

var (
	// ErrStorageTimeout is the error of a storage call that did not
	// answer within Config.StorageTimeout.
	ErrStorageTimeout = quota.ErrStorageTimeout
	// ErrStorageEvicts is wrapped by the warning about a Redis that may
	// evict the limiter's keys at its memory limit.
	ErrStorageEvicts = quota.ErrStorageEvicts
)
