package limiter

import (
	"fmt"
	"reflect"
	"time"

	"github.com/gofiber/fiber/v3"
)

// Config defines the limiter. Its first fields are those of Fiber v3's own
// middleware/limiter, by the same names, types and defaults, so that a
// Fiber v3 config compiles after changing only the import path; the
// fields after DisableValueRedaction are this limiter's own. An invalid
// value makes New panic with a message that names the field.
type Config struct {
	// Storage keeps the limiter's state. A storage on go-redis, such as
	// the *Storage of github.com/gofiber/storage/redis/v3 or this
	// module's storage/redis Store, is detected (it has Conn()) and used
	// through atomic Lua scripts: any number of replicas sharing the Redis
	// admit exactly the limit between them, on one Redis or a Cluster.
	// Any other fiber.Storage is read, decided and written back under a
	// lock of this process: exact for one process, not across replicas.
	//
	// Optional. Default: nil (in this process's memory)
	Storage fiber.Storage

	// LimiterMiddleware chooses the algorithm: FixedWindow{},
	// SlidingWindow{}, TokenBucket{} or SlidingLog{}.
	//
	// Optional. Default: FixedWindow{}
	LimiterMiddleware Handler

	// Next skips the limiter for a request when it returns true: the
	// request is neither counted nor given rate-limit headers.
	//
	// Optional. Default: nil
	Next func(c fiber.Ctx) bool

	// MaxFunc, when set, returns Max for each request instead of the Max
	// field, for limits that depend on the client (a plan, an API key). A
	// result <= 0 means no limit for that request: it passes uncounted
	// and without headers. Results above 2^32-1 are capped there.
	//
	// Left unset, or set to ConfigDefault.MaxFunc, it stands for the Max
	// field: as in Fiber v3, New fills it with a function that returns
	// Max before it calls LimiterMiddleware.New, so that a Handler of the
	// user's own may call it.
	//
	// Optional. Default: a function that returns Max
	MaxFunc func(c fiber.Ctx) int

	// ExpirationFunc, when set, returns Expiration for each request
	// instead of the Expiration field; a result <= 0 means Expiration. A
	// key's count under one window is kept apart from its count under
	// another, so the results should come from a fixed set (one per plan
	// or route): a result that changes from request to request, such as
	// the time left to a deadline, gives every request a fresh count and
	// limits nothing.
	//
	// Left unset, it stands for the Expiration field: New fills it with a
	// function that returns Expiration, as MaxFunc with Max.
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

	// DisableHeaders sends no rate-limit headers (Retry-After still goes
	// with a rejection). Headers: HeadersNone means the same.
	//
	// Optional. Default: false
	DisableHeaders bool

	// DisableValueRedaction is accepted for Fiber's sake: this limiter
	// puts no key into its errors or logs, so there is nothing to redact.
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
	// algorithm and windows (one per route, say): each must have its own,
	// or the same Name to share one count. It holds no ':', '{' or '}'.
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
	// HeadersIETF, HeadersBoth or HeadersNone.
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

	// OnDecision, when set, is called with every decision, for logs and
	// metrics.
	//
	// Optional. Default: nil
	OnDecision func(c fiber.Ctx, e DecisionEvent)

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
	// (IdempotencyKeys). Not with MaxFunc or ExpirationFunc: New panics.
	//
	// Optional. Default: nil (none)
	IdempotencyKey func(c fiber.Ctx) string

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

	// MaxKeys bounds the keys kept in memory (in memory, or by
	// FailFallback); under SlidingLog, so do 256 MiB of logs.
	//
	// Optional. Default: 1 << 20
	MaxKeys int

	// FailurePolicy says what happens to a request when Storage fails or
	// its breaker is open. Under FailFallback a Redis call that timed out
	// is rejected (429) until the breaker opens: Redis may still count it.
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
	// Optional. Default: nil (warnings go to the standard logger)
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
// fill the fields a config leaves unset.
var ConfigDefault = Config{
	Max:          defaultMax,
	Expiration:   1 * time.Minute,
	MaxFunc:      maxOf(defaultMax),
	KeyGenerator: defaultKeyGenerator,
	LimitReached: func(c fiber.Ctx) error {
		return c.SendStatus(fiber.StatusTooManyRequests)
	},
	LimiterMiddleware: FixedWindow{},
}

// defaultMax is ConfigDefault's Max.
const defaultMax = 5

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
	} else if v := reflect.ValueOf(cfg.LimiterMiddleware); v.Kind() == reflect.Pointer && v.IsNil() {
		panic(fmt.Sprintf("limiter: LimiterMiddleware is a nil %v; use FixedWindow{}, SlidingWindow{}, TokenBucket{}, SlidingLog{} or leave it nil for the default", v.Type()))
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
