package limiter

import (
	"fmt"
	"reflect"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	rlheaders "github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v2"
)

// Config defines the limiter. Its fields from Next to Key (the deprecated
// Duration, Store and Key among them) have the names, types and defaults
// of Fiber's middleware/limiter, so a Fiber config compiles unchanged
// (MaxFunc is Fiber v3's; Fiber v2.52 has none); the fields from Burst on
// are this limiter's own. An invalid value makes New panic with a message
// that names the field. docs/configuration.md lists every field; package
// quota's Config documents the engine's settings in full.
type Config struct {
	// Next skips the limiter for a request when it returns true: the request
	// is neither counted nor given rate-limit headers.
	//
	// Optional. Default: nil
	Next func(c *fiber.Ctx) bool

	// Max is the number of requests (units of Cost) a key may make per
	// Expiration; for TokenBucket, the refill rate. 0 (the default) to 2^32-1,
	// and under SlidingLog at most 10,000, of all Limits together. For several
	// limits at once, see Limits.
	//
	// Default: 5
	Max int

	// MaxFunc, when set, returns Max for each request (a plan, an API key);
	// Fiber v3 has it, Fiber v2.52 does not. As in Fiber v3, a result of 0
	// leaves the request unlimited, uncounted and without headers, and one
	// below 0 rejects it (LimitReached, no Retry-After). Not with SlidingLog, Limits or
	// IdempotencyKey. See quota.Config.VaryMax.
	//
	// Optional. Default: nil
	MaxFunc func(c *fiber.Ctx) int

	// KeyGenerator returns the key a request is counted under: by default
	// c.IP(), an IPv6 client keyed by its network (see IPv6Prefix).
	//
	// Default: the client address, IPv6 by its /64 network
	KeyGenerator func(*fiber.Ctx) string

	// Expiration is the window's length (for TokenBucket, the time in which
	// Max tokens refill): 0 (the default) or at least 1 ms, kept to the
	// millisecond where Fiber v2 rounds to seconds. Very large quotas count in
	// coarser steps: see docs/configuration.md, "Panics at New".
	//
	// Default: 1 * time.Minute
	Expiration time.Duration

	// LimitReached is called for a rejected request, after the rate-limit
	// headers and Retry-After are set.
	//
	// Default: func(c *fiber.Ctx) error {
	//   return c.SendStatus(fiber.StatusTooManyRequests)
	// }
	LimitReached fiber.Handler

	// SkipFailedRequests gives back the cost of a request whose response
	// status is >= 400, a returned error included (a *fiber.Error by its code,
	// else 500; Fiber v2 counts it as successful). The request is counted
	// first, so concurrent requests cannot all slip through.
	//
	// Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back the cost of a request whose response
	// status is < 400, as SkipFailedRequests does for failed ones.
	//
	// Default: false
	SkipSuccessfulRequests bool

	// Storage keeps the limiter's state; nil keeps it in this process. A
	// go-redis storage (with a Conn() method, as gofiber/storage/redis/v3 has)
	// is decided atomically in Redis, exact across replicas; any other
	// fiber.Storage is exact within one process only. See docs/redis.md.
	//
	// Default: nil (in memory)
	Storage fiber.Storage

	// LimiterMiddleware chooses the algorithm: FixedWindow{}, SlidingWindow{},
	// TokenBucket{} or SlidingLog{} (docs/algorithms.md compares them), or a
	// type of the user's own that implements LimiterHandler.
	//
	// Default: FixedWindow{}
	LimiterMiddleware LimiterHandler

	// Deprecated: Use Expiration instead. When set, it replaces
	// Expiration, as in Fiber (Expiration set to another value than
	// ConfigDefault's as well makes New panic).
	Duration time.Duration

	// Deprecated: Use Storage instead. When set, it replaces Storage (a
	// different Storage set as well makes New panic).
	Store fiber.Storage

	// Deprecated: Use KeyGenerator instead. When set, it replaces
	// KeyGenerator, as in Fiber (a KeyGenerator other than ConfigDefault's
	// set as well makes New panic).
	Key func(*fiber.Ctx) string

	// Burst is TokenBucket's capacity: the largest burst a rested client may
	// send at once. Only TokenBucket takes it (New panics for another
	// algorithm); 0 means Max (or MaxFunc's result).
	//
	// Default: Max
	Burst int

	// Cost returns how many units a request takes. A cost of 0 is admitted
	// uncounted; one above the limit (TokenBucket: the Burst) is always
	// rejected, without Retry-After; a negative one fails the request with an
	// error.
	//
	// Optional. Default: 1 per request
	Cost func(c *fiber.Ctx) int

	// KeyPrefix begins every key in Storage, before the limiter's identity
	// (see Name), so that two apps can share a store.
	//
	// Default: "limiter:"
	KeyPrefix string

	// IPv6Prefix is the network, in bits, that the default KeyGenerator keys
	// an IPv6 client by (one host owns a whole /64); 128 keys each address on
	// its own. 0 (the default) to 128. In memory, a prefix that is not a
	// multiple of 8, or is 32, costs an allocation per request.
	//
	// Default: 64
	IPv6Prefix int

	// Name tells apart limiters that share a Storage with the same algorithm
	// and windows (one per route, say): New panics for a second one without a
	// Name of its own; the same Name shares one count on purpose. No ':', '{'
	// or '}'. See docs/algorithms.md, "Several limits, several limiters".
	//
	// Optional. Default: ""
	Name string

	// Limits decides each request under several limits at once (10 per second
	// and 1000 per hour) in place of Max, Expiration, MaxFunc and Burst, which
	// must then be unset (ConfigDefault's Max and Expiration count as unset).
	// At most 4. See docs/algorithms.md, "Several limits, several limiters".
	//
	// Optional. Default: nil (one limit: Max per Expiration)
	Limits []Limit

	// DisableHeaders sends no rate-limit header at all, as in Fiber:
	// Retry-After neither (Headers: HeadersNone keeps Retry-After on a
	// rejection).
	//
	// Default: false
	DisableHeaders bool

	// Headers chooses the rate-limit response headers: HeadersXRateLimit
	// (Fiber's), HeadersIETF, HeadersBoth or HeadersNone; Retry-After goes
	// with every rejection that can succeed later. See docs/headers.md.
	//
	// Default: HeadersXRateLimit
	Headers HeaderMode

	// PolicyName names the quota policy in the IETF headers. It must be
	// printable ASCII; quotes and backslashes are escaped. Setting it (or
	// HeaderPartitionKey) without HeadersIETF or HeadersBoth panics.
	//
	// Default: "default"
	PolicyName string

	// HeaderPartitionKey adds the limited key to the IETF headers, as their
	// pk parameter (base64; a key longer than 64 bytes as its SHA-256
	// digest). Off by default, because the key may be a client's IP
	// address or token.
	//
	// Default: false
	HeaderPartitionKey bool

	// DryRun decides, counts and sets headers as usual but rejects nothing
	// (nor does FailClosed), so that OnDecision can measure a limit before it
	// is enforced. See docs/configuration.md, "Dry run and metrics".
	//
	// Default: false
	DryRun bool

	// OnDecision, when set, is called with every decision (a DecisionEvent) on
	// the request's goroutine, for metrics and logs; requests that Next skips
	// or MaxFunc leaves unlimited are not reported. Its cost: see
	// docs/configuration.md, "Dry run and metrics".
	//
	// Optional. Default: nil
	OnDecision func(c *fiber.Ctx, e DecisionEvent)

	// MinInterval, when above 0, is the least time between two admitted
	// requests of a client ("and no two requests closer than 200 ms"): one
	// that comes sooner gets 429 and counts nothing. At most a year. See
	// quota.Config.MinInterval.
	//
	// Optional. Default: 0 (none)
	MinInterval time.Duration

	// Lease, when above 0 and Storage is set, lets each replica decide a
	// busy client's requests from a share of its quota that it takes from
	// the Storage (Redis) in one call and keeps for at most Lease (and 900
	// ms at most), instead of a call per request: replicas together still never admit more than
	// Max. Not with MaxFunc, BlockFor, MinInterval, SlidingLog{}, or
	// TokenBucket{} with Skip*Requests (New panics). See quota.Config.Lease
	// and docs/leases.md.
	//
	// Optional. Default: 0 (a Redis call per request)
	Lease time.Duration

	// MaxDelay, when above 0, makes a request over the limit whose turn
	// comes within MaxDelay wait for it instead of getting 429: its turn
	// is counted at once (on Redis in the same script call, so replicas
	// together never admit more than the limit), the request waits, then
	// runs, with headers that show the state at its turn. One whose turn
	// lies further gets 429 at once. A waiter whose UserContext ends gives
	// its turn back (fasthttp does not end it when a client leaves). At
	// most MaxWaiting wait at once. At most a minute, or the shortest
	// limit's Expiration if longer; under DryRun nothing waits. Not with
	// MaxFunc, IdempotencyKey, Lease, BlockFor or MinInterval (New
	// panics). With Concurrency{}, the longest a request waits for a slot.
	// See quota.Limiter.Reserve and docs/waiting.md.
	//
	// Optional. Default: 0 (429 at once)
	MaxDelay time.Duration

	// MaxWaiting bounds the requests that wait for their turn at once in
	// this process (MaxDelay); past it, a request is decided as if
	// MaxDelay were 0.
	//
	// Optional. Default: 1024
	MaxWaiting int

	// BlockFor, when above 0, holds a client off for this long after a
	// rejection, whatever its counts: its requests get 429 with Retry-After
	// the time until the request would be admitted (the rest of the block,
	// or longer when the limit has no room for it by then). At most a year.
	// See quota.Config.BlockFor.
	//
	// Optional. Default: 0 (none)
	BlockFor time.Duration

	// IdempotencyKey, when set, names a request for its retries (see
	// IdempotencyKeyHeader): a repeat of an admitted request within
	// IdempotencyTTL gets its decision again and counts nothing, but still runs
	// the handler, so do not use it where repeats are what is to be limited
	// (login attempts). Not with MaxFunc. See quota.Limiter.TakeIdempotent.
	//
	// Optional. Default: nil (none)
	IdempotencyKey func(c *fiber.Ctx) string

	// IdempotencyTTL is how long a request's decision is kept for its
	// repeats (see IdempotencyKey), at most 365 days.
	//
	// Optional. Default: 1 hour
	IdempotencyTTL time.Duration

	// IdempotencyKeys bounds the decisions kept for repeats in this process
	// (Redis keeps its own), at most 2^24. See quota.Config.IdempotencyKeys.
	//
	// Optional. Default: 8192
	IdempotencyKeys int

	// MaxKeys caps the keys kept in memory (with Storage, by the FailFallback
	// limiter), about 64 bytes each: past it, a new key takes the place of one
	// near its reset. See docs/configuration.md, "In-memory manager".
	//
	// Default: 1 << 20 (1,048,576 keys)
	MaxKeys int

	// FailurePolicy says what a request gets while Storage fails: FailFallback
	// decides it in this replica's memory, FailOpen admits it, FailClosed
	// answers 503, FailError hands the storage's error to Fiber's error
	// handler (Fiber's own behaviour); a Redis call that timed out is
	// answered 429 until the breaker opens. See docs/failure-handling.md.
	//
	// Default: FailFallback
	FailurePolicy FailurePolicy

	// DisableValueRedaction shows the key in the errors the limiter hands
	// to Fiber's error handler (FailError's storage errors); by default it
	// is "[redacted]", as in Fiber v3.
	//
	// Default: false
	DisableValueRedaction bool

	// StorageTimeout bounds each Storage call; a slower call is a failure,
	// decided by FailurePolicy. 0 (the default) or at least 1 ms. See
	// docs/failure-handling.md.
	//
	// Default: 100 * time.Millisecond
	StorageTimeout time.Duration

	// BreakerFailures is how many Storage calls in a row must time out or find
	// Storage out of service for the breaker to open: requests then go to
	// FailurePolicy until a background probe finds Storage back. 0 (the
	// default) to 2^31-1. See quota.Config.BreakerFailures.
	//
	// Default: 5
	BreakerFailures int

	// BreakerCooldown is how long an open breaker waits between probes of
	// Storage. Must be 0 (the default) or at least 1 ms. Unused without
	// Storage.
	//
	// Default: 500 * time.Millisecond
	BreakerCooldown time.Duration

	// OnStorageError, when set, is told of Storage failures as a
	// *StorageError, at most once a second, and of warnings such as a Redis
	// that may evict the limiter's keys (ErrStorageEvicts). See
	// quota.Config.OnStorageError.
	//
	// Optional. Default: nil (failures and warnings go to log.Print)
	OnStorageError func(err error)

	// DenyCacheKeys is how many keys a rejection by Storage is remembered for
	// in this process, whose requests are then rejected here until Retry-After
	// without a call; 68 bytes a key, allocated at New. 0 (the default) to
	// 2^24. See docs/failure-handling.md.
	//
	// Default: 8192
	DenyCacheKeys int

	// DisableDenyCache turns the deny cache off: every request goes to
	// Storage, and DenyCacheKeys is not used.
	//
	// Default: false
	DisableDenyCache bool

	// clock, when set, replaces the wall clock (tests only): ms since any
	// fixed origin.
	clock func() int64
}

// Limit is one limit of Config.Limits: at most Max units of cost per
// Expiration (for TokenBucket: a bucket of Burst tokens refilled at Max per
// Expiration).
type Limit struct {
	// Max is the number of requests (units of Cost) admitted per
	// Expiration: 1 to 2^32-1.
	Max int

	// Expiration is the limit's window, at least 1 ms; a fraction of a
	// millisecond is rounded up. No two limits of a limiter may have the
	// same one.
	Expiration time.Duration

	// Burst is the TokenBucket's capacity under this limit. Only
	// TokenBucket uses it. Must be >= 0; zero means Max.
	Burst int

	// PolicyName names the limit in the IETF headers (HeadersIETF or
	// HeadersBoth, which it needs).
	//
	// Default: with several limits, Config.PolicyName (or "default") + "-"
	// + the window, as in "default-1s"; with one, Config.PolicyName (or
	// "default")
	PolicyName string
}

// ConfigDefault is the config used when New is called without one, and the
// source of the defaults New fills in, but for IPv6Prefix (64),
// IdempotencyTTL (1 hour) and IdempotencyKeys (8192), which New fills in
// when they are 0. Its numbers are package quota's defaults.
var ConfigDefault = Config{
	Max:          quota.DefaultMax,
	Expiration:   quota.DefaultExpiration,
	KeyGenerator: defaultKeyGenerator,
	LimitReached: func(c *fiber.Ctx) error {
		return c.SendStatus(fiber.StatusTooManyRequests)
	},
	LimiterMiddleware: FixedWindow{},
	KeyPrefix:         quota.DefaultKeyPrefix,
	MaxKeys:           quota.DefaultMaxKeys,
	FailurePolicy:     FailFallback,
	StorageTimeout:    quota.DefaultStorageTimeout,
	BreakerFailures:   quota.DefaultBreakerFailures,
	BreakerCooldown:   quota.DefaultBreakerCooldown,
	DenyCacheKeys:     quota.DefaultDenyCacheKeys,
}

// configDefault validates the user's config and fills in the defaults. It
// panics with a message that names the field for an invalid value.
func configDefault(config ...Config) Config {
	if len(config) == 0 {
		return ConfigDefault
	}
	cfg := config[0]
	// The deprecated fields override their successors, as in Fiber, also
	// in a config copied from ConfigDefault: unless the successor holds
	// another value of the user's own, which is ambiguous. They are then
	// cleared, so that applying the defaults again (LimiterHandler.New
	// does) finds nothing to move.
	checkMillisecondsOrZero("Duration", cfg.Duration, ConfigDefault.Expiration)
	if cfg.Duration != 0 {
		if cfg.Expiration != 0 && cfg.Expiration != ConfigDefault.Expiration && cfg.Expiration != cfg.Duration {
			panic(fmt.Sprintf("limiter: Duration (deprecated) is %v and Expiration is %v; set only Expiration", cfg.Duration, cfg.Expiration))
		}
		cfg.Expiration, cfg.Duration = cfg.Duration, 0
	}
	if cfg.Key != nil {
		if cfg.KeyGenerator != nil && !isDefaultKeyGenerator(cfg.KeyGenerator) {
			panic("limiter: Key (deprecated) and KeyGenerator are both set; set only KeyGenerator")
		}
		cfg.KeyGenerator, cfg.Key = cfg.Key, nil
	}
	if cfg.Store != nil {
		if cfg.Storage != nil && !sameValue(cfg.Storage, cfg.Store) {
			panic("limiter: Store (deprecated) and Storage are both set; set only Storage")
		}
		cfg.Storage, cfg.Store = cfg.Store, nil
	}
	if cfg.IPv6Prefix == 0 {
		cfg.IPv6Prefix = defaultIPv6Prefix
	}
	if len(cfg.Limits) > 0 {
		checkLimits(&cfg)
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
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = ConfigDefault.KeyPrefix
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = ConfigDefault.MaxKeys
	}
	if cfg.StorageTimeout == 0 {
		cfg.StorageTimeout = ConfigDefault.StorageTimeout
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = ConfigDefault.BreakerFailures
	}
	if cfg.BreakerCooldown == 0 {
		cfg.BreakerCooldown = ConfigDefault.BreakerCooldown
	}
	if cfg.DenyCacheKeys == 0 {
		cfg.DenyCacheKeys = ConfigDefault.DenyCacheKeys
	}
	return cfg
}

// checkLimits validates cfg.Limits, and clears Max and Expiration when they
// hold ConfigDefault's values (a config copied from ConfigDefault).
func checkLimits(cfg *Config) {
	if cfg.Max == ConfigDefault.Max {
		cfg.Max = 0
	}
	if cfg.Expiration == ConfigDefault.Expiration {
		cfg.Expiration = 0
	}
	switch {
	case cfg.Max != 0 || cfg.Expiration != 0:
		panic(fmt.Sprintf("limiter: Limits is set, and so are Max (%d) or Expiration (%v); set each limit's Max and Expiration in Limits only", cfg.Max, cfg.Expiration))
	}
}

// checkMillisecondsOrZero rejects a duration that is negative or below a
// millisecond, the resolution the limiter keeps time in; 0 means def.
func checkMillisecondsOrZero(field string, d, def time.Duration) {
	if d < 0 || (d > 0 && d < time.Millisecond) {
		panic(fmt.Sprintf("limiter: %s is %v; it must be 0 (default %v) or at least 1ms", field, d, def))
	}
}

// sameValue reports whether a and b are the same comparable value (false,
// rather than a panic, for values Go cannot compare).
func sameValue(a, b any) bool {
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// IdempotencyKeyHeader is an IdempotencyKey: the request's
// Idempotency-Key header (copied), or "" when it has none.
func IdempotencyKeyHeader(c *fiber.Ctx) string {
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
