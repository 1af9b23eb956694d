package limiter

import (
	"fmt"
	"reflect"
	"time"

	"github.com/gofiber/fiber/v2"
)

// Config defines the limiter. Its fields from Next to Key (the deprecated
// Duration, Store and Key among them) have the names, types and defaults
// of Fiber's middleware/limiter, so a Fiber config compiles unchanged
// (MaxFunc is Fiber v3's; Fiber v2.52 has none); the fields from Burst on
// are this limiter's own. An invalid value makes New panic with a message
// that names the field.
type Config struct {
	// Next skips the limiter for a request when it returns true: the request
	// is neither counted nor given rate-limit headers.
	//
	// Optional. Default: nil
	Next func(c *fiber.Ctx) bool

	// Max is the number of requests (units of Cost) a key may make per
	// Expiration. For TokenBucket it is the refill rate: Max tokens per
	// Expiration. Must be 0 (the default) to 2^32-1, and for SlidingLog at
	// most 10,000 (of all Limits together); any value works with any
	// Expiration (see Expiration).
	// For several limits at once, see Limits.
	//
	// Default: 5
	Max int

	// MaxFunc, when set, returns Max for each request instead of the Max
	// field, for limits that depend on the client (a plan, an API key). A
	// result <= 0 means no limit for that request: it passes uncounted and
	// without headers. Results above 2^32-1 are capped there. The limiter
	// keeps time in steps fit for the largest result (see Expiration): 1 ms
	// for windows up to about 8.7 minutes, 8 ms for an hour. SlidingLog
	// takes none (its keys keep one entry per unit of Max): New panics.
	//
	// Optional. Default: nil
	MaxFunc func(c *fiber.Ctx) int

	// KeyGenerator returns the key a request is counted under. The default
	// is the client's address, c.IP(), with an IPv6 client keyed by its
	// network (see IPv6Prefix): one host owns a whole /64 and could take a
	// fresh address for every request.
	//
	// Default: the client address, IPv6 by its /64 network
	KeyGenerator func(*fiber.Ctx) string

	// Expiration is the length of the window (for TokenBucket, the time in
	// which Max tokens refill). The limiter keeps millisecond time, so
	// windows shorter than a second work; a fraction of a millisecond is
	// rounded up. Any length up to the longest time.Duration works. A quota
	// too large to count exactly in milliseconds over its window (Max ×
	// Expiration in ms above 2^51, say 10^8 per day) is counted in the
	// finest coarser steps that keep it exact (4 ms there; 1.152 s for a
	// billion per 30 days), preferably steps that divide the window, else
	// rounding it up by less than a step. Must be 0 (the default) or at
	// least 1 ms.
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
	// status is >= 400 (including a handler that returns an error, such as a
	// *fiber.Error). The request is counted first, so concurrent requests
	// cannot all slip through, then credited back in the window it was
	// counted in. Its rate-limit headers show the count after the credit.
	//
	// Default: false
	SkipFailedRequests bool

	// SkipSuccessfulRequests gives back the cost of a request whose response
	// status is < 400, as SkipFailedRequests does for failed ones.
	//
	// Default: false
	SkipSuccessfulRequests bool

	// Storage keeps the limiter's state outside the process. Left nil, a
	// sharded in-memory manager keeps it for this process only: the fastest
	// choice and exact within one process. A storage on go-redis, one with
	// a Conn() redis.UniversalClient method (the *Storage of
	// github.com/gofiber/storage/redis/v3, or this module's storage/redis
	// Store), is decided by an atomic Lua script in Redis: exact across any
	// number of replicas sharing the Redis or Redis Cluster. Any other
	// fiber.Storage works through get, modify and set under a lock in this
	// process, which is exact for one process but not atomic across
	// replicas sharing the store. Limiters sharing a Storage keep apart by
	// their Name, algorithm and windows (see Name).
	//
	// Default: nil (in memory)
	Storage fiber.Storage

	// LimiterMiddleware chooses the algorithm: FixedWindow{}, SlidingWindow{},
	// TokenBucket{} or SlidingLog{}. A user type that implements LimiterHandler works too.
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

	// Burst is the TokenBucket's capacity: how many tokens a full bucket
	// holds, so how large a burst a rested client may send at once. Only
	// TokenBucket uses it. Must be >= 0; zero means Max (or MaxFunc's result).
	//
	// Default: Max
	Burst int

	// Cost returns how many units a request takes (for instance more for an
	// expensive endpoint). It must return >= 0; a request of cost 0 is
	// admitted without being counted. A request whose cost exceeds the limit
	// (the Burst for TokenBucket) is always rejected, without Retry-After.
	// A negative cost fails the request with an error.
	//
	// Optional. Default: 1 per request
	Cost func(c *fiber.Ctx) int

	// KeyPrefix is put before every key in Storage, so that two apps can
	// share a store. The limiter's identity follows it (see Name).
	//
	// Default: "limiter:"
	KeyPrefix string

	// IPv6Prefix is the length in bits of the network an IPv6 client is
	// keyed by with the default KeyGenerator: all addresses of one /64 are
	// one client, so a host cannot walk past the limit by rotating through
	// its network's addresses. 128 keys each address on its own. IPv4
	// clients, and IPv4-mapped IPv6 addresses, are keyed by their address.
	// Must be 0 (the default) to 128. In memory, the default key reads the
	// address without allocating, but for a prefix that is not a multiple
	// of 8 bits, or is 32: every request then formats it as text.
	//
	// Default: 64
	IPv6Prefix int

	// Name is the limiter's identity in Storage. A key's state is stored
	// under KeyPrefix + Name + ":" + the algorithm's tag + ":" + the
	// windows of its limits + ":" + the key, for example
	// "limiter:login:fw:15s:203.0.113.7" (or "limiter::fw:1m:203.0.113.7"
	// without a Name). Limiters that differ in algorithm or in a window
	// therefore never share state; replicas running the same code do, and
	// admit exactly the limit together. Two limiters of one process on the
	// same Storage with the same algorithm and windows and no Name would
	// read each other's state: New panics for the second, asking for a
	// Name (say, the route); when limiters of one identity are made many
	// times a second (one per request), a clash found within a second of
	// the last check is reported through OnStorageError or the log
	// instead, at the next garbage collection. The same Storage is, for Redis, the same
	// server address and database through any client, as any ACL user
	// (the same seed addresses for a Cluster or Ring; the same client for
	// a Sentinel failover client), and for another fiber.Storage the same
	// value.
	// Limiters given the same Name (and the same algorithm and windows)
	// share their state on purpose, as replicas do. Changing Max, Burst or
	// a PolicyName keeps the counts a deploy finds; changing an Expiration,
	// or the number or order of the Limits, starts every key afresh, the
	// old state expiring on its own. In memory every limiter has its own
	// state, whatever its Name. It must not contain ':', '{' or '}'.
	//
	// Optional. Default: ""
	Name string

	// Limits decides every request under several limits at once, say 10
	// per second and 1000 per hour, in place of Max and Expiration: a
	// request is admitted when every limit admits it, and then counted
	// under each; a request that one limit rejects is counted under none.
	// In Redis it is one script call on one key, exact across replicas.
	// The rate-limit headers describe the most restrictive limit (the
	// least remaining, then the longest wait), the IETF fields list every
	// limit as a policy of its own, and Retry-After is when every limit
	// admits the request again. Give at most 4 limits, each with its own
	// Expiration (under SlidingLog, their Max add up to at most 10,000);
	// Max, Expiration, MaxFunc and Burst must then be left
	// unset (Max 5 and Expiration 1 minute, ConfigDefault's, count as
	// unset), or New panics.
	//
	// Optional. Default: nil (one limit: Max per Expiration)
	Limits []Limit

	// DisableHeaders turns off the rate-limit response headers, as Headers:
	// HeadersNone does. Retry-After is still sent with a rejection.
	//
	// Default: false
	DisableHeaders bool

	// Headers chooses the rate-limit response headers: HeadersXRateLimit
	// (X-Ratelimit-Limit, -Remaining, -Reset: the limit, what is left, and
	// whole seconds until the quota is fully back), HeadersIETF
	// (RateLimit-Policy and RateLimit of draft-ietf-httpapi-ratelimit-headers-10,
	// RFC 9651 structured fields: `"default";q=100;w=60` and
	// `"default";r=42;t=17`), HeadersBoth, or HeadersNone. In RateLimit, t
	// is on a rejection the Retry-After value, so Retry-After is never
	// earlier than t, and otherwise the seconds until the quota is fully
	// back. For TokenBucket, q is the Burst and w the seconds a bucket takes
	// to fill. w is whole seconds, rounded up, and q is not scaled to it, so
	// a window below a second (or of a fractional number of seconds) is
	// advertised as a stricter policy than the one enforced. With several
	// limiters in a row under different PolicyNames, the fields list every
	// policy. Retry-After goes with every rejection that can succeed later,
	// whatever the mode.
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

	// DryRun makes the limiter decide, count and set headers as usual but
	// never reject: a request over the limit goes on (uncounted, as any
	// rejected request, and without Retry-After), and OnDecision sees it
	// with Allowed false. With FailClosed, a failing Storage lets requests
	// through as well. To measure a new limit in production before
	// enforcing it.
	//
	// Default: false
	DryRun bool

	// OnDecision, when set, is called with every decision, admitted or
	// not, on the request's goroutine, before the request goes on or is
	// rejected: for metrics and logs. It costs the call and two clock
	// reads. Requests that Next skips, or that a MaxFunc result <= 0 leaves
	// unlimited, are not decided and not reported. With the default
	// KeyGenerator in memory, setting it (or HeaderPartitionKey) makes the
	// key the client IP as text, which costs one allocation per request.
	// See DecisionEvent.
	//
	// Optional. Default: nil
	OnDecision func(c *fiber.Ctx, e DecisionEvent)

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
	// attempts). "" counts the request as usual. On Redis the
	// check and the count are one script call, exact across replicas; in
	// memory and other Storage the decisions are kept in this process
	// (IdempotencyKeys). Not with MaxFunc: New panics.
	//
	// Optional. Default: nil (none)
	IdempotencyKey func(c *fiber.Ctx) string

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

	// MaxKeys caps how many keys the in-memory manager tracks, so a flood of
	// distinct keys cannot exhaust memory (a key costs about 64 bytes plus
	// its length under one limit, about 30 more for each further limit and
	// about 25 more with BlockFor or MinInterval, and keys longer than 64
	// bytes are kept as a 32-byte digest; under SlidingLog 8 bytes more per unit of Max, and the keys
	// are also bounded so that the logs hold at most 256 MiB). The cap is enforced per shard, MaxKeys/256 keys each (rounded
	// up), so it can bite a little before MaxKeys keys in all. When a new key
	// arrives at a full shard, it takes the slot of the key closest to its
	// reset among 8 sampled at random (an expired key always is), which
	// starts afresh if it returns. Must be >= 0; zero means the default.
	// With Storage, it caps the FailFallback limiter.
	//
	// Default: 1 << 20 (1,048,576 keys)
	MaxKeys int

	// FailurePolicy says what happens to a request when Storage fails (an
	// error, or no answer within StorageTimeout) or while the breaker keeps
	// requests off a failing Storage: FailFallback decides it with a
	// per-replica in-memory limiter of the same rule, FailOpen admits it,
	// FailClosed rejects it with 503. Under FailFallback a Redis call that
	// timed out is rejected (429, Retry-After 1 s) rather than decided by
	// the fallback, unless Redis refuses service or the breaker is open:
	// Redis may still count it. Unused without Storage.
	//
	// Default: FailFallback
	FailurePolicy FailurePolicy

	// StorageTimeout bounds each call to Storage. A call that takes longer
	// counts as a failure (towards BreakerFailures unless Storage answered
	// other calls meanwhile), and the request goes to FailurePolicy at once.
	// Over Redis the call returns by this deadline: a plain or failover
	// go-redis Client made without ContextTimeoutEnabled is used through a
	// copy with it set, sharing its connections (see storage/redis.New);
	// one made with it, and a ClusterClient or Ring made with it, as it is. For a ClusterClient or Ring
	// without it, and for any other fiber.Storage, which takes no context,
	// the call runs on a goroutine of its own so that the request need not
	// wait for it. Must be 0 (the default) or at least 1 ms. Unused without
	// Storage.
	//
	// Default: 100 * time.Millisecond
	StorageTimeout time.Duration

	// BreakerFailures is how many Storage calls in a row must find Storage
	// out of reach or out of service before the breaker opens: a timeout, a
	// network error, a Redis error reply about the server rather than the
	// key (OOM at maxmemory, MISCONF, a refused password or database
	// (WRONGPASS, NOAUTH, NOPERM, DB index out of range), LOADING, BUSY,
	// READONLY, MASTERDOWN, CLUSTERDOWN, too many clients), or another error
	// that made the call wait. Requests then go straight to FailurePolicy
	// without waiting on Storage. Once BreakerCooldown has passed, a probe
	// goes to Storage in the background (by a timer, so an idle replica
	// probes too), and again every BreakerCooldown while it fails; the
	// breaker closes when one succeeds. Over Redis the probe is a script
	// call that writes, as a decision does, on the key KeyPrefix + Name +
	// "{probe}", kept for 1 ms, so that a server that answers PING but
	// refuses or holds writes keeps the breaker open; over another Storage
	// it is a Get. Another error that Storage answers (a Redis error reply
	// such as WRONGTYPE, or a fiber.Storage error within 2 ms) does not
	// count: it may be about one client's key. Must be >= 0; zero means the
	// default. Unused without Storage.
	//
	// Default: 5
	BreakerFailures int

	// BreakerCooldown is how long an open breaker waits between probes of
	// Storage. Must be 0 (the default) or at least 1 ms. Unused without
	// Storage.
	//
	// Default: 500 * time.Millisecond
	BreakerCooldown time.Duration

	// OnStorageError, when set, is told about Storage failures, for logs and
	// metrics: at the first failure, then at most once per second while
	// failures go on, each time with a *StorageError holding the latest
	// error and the number of failed calls since the previous report. It is
	// called on the request's goroutine, or the probe's, and should return
	// quickly. Over Redis it is also told, from a goroutine of its own at
	// the first decision and hourly after while it holds, when a server
	// may evict the limiter's keys (a *StorageError with Failures 0 whose
	// Err wraps ErrStorageEvicts), or once when a server refuses the INFO
	// command that tells; the limiters of a process that share a Redis
	// look once between them, and the one that looks is told. Without it,
	// those warnings go to the standard logger (log.Print).
	//
	// Optional. Default: nil
	OnStorageError func(err error)

	// DenyCacheKeys is the size of the deny cache, in keys: when Storage
	// rejects a request, the key is rejected locally, without a call to
	// Storage, until its RetryAfter has passed, for requests of the same
	// cost under the same limit. A flood on an exhausted key then
	// costs Storage about one call per replica per RetryAfter. The cache
	// takes 68 bytes a key (and 24 more for each limit past the first), for
	// DenyCacheKeys rounded up to a power of two, allocated at New, and
	// forgets the key closest to its end when full. Its only effect on
	// decisions is timing:
	// a credit within that period (a refund by another replica) is seen only
	// once the period ends. A refund on this replica clears the key. Must be
	// >= 0; zero means the default. Unused without Storage.
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
	// Expiration. Must be >= 1.
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
// when they are 0.
var ConfigDefault = Config{
	Max:          5,
	Expiration:   1 * time.Minute,
	KeyGenerator: defaultKeyGenerator,
	LimitReached: func(c *fiber.Ctx) error {
		return c.SendStatus(fiber.StatusTooManyRequests)
	},
	LimiterMiddleware: FixedWindow{},
	KeyPrefix:         "limiter:",
	MaxKeys:           1 << 20,
	FailurePolicy:     FailFallback,
	StorageTimeout:    100 * time.Millisecond,
	BreakerFailures:   5,
	BreakerCooldown:   500 * time.Millisecond,
	DenyCacheKeys:     8192,
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
	} else if v := reflect.ValueOf(cfg.LimiterMiddleware); isNilValue(v) {
		panic(fmt.Sprintf("limiter: LimiterMiddleware is a nil %v; use FixedWindow{}, SlidingWindow{}, TokenBucket{}, SlidingLog{} or leave it nil for the default", v.Type()))
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

func isNilValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// IdempotencyKeyHeader is an IdempotencyKey: the request's
// Idempotency-Key header (copied), or "" when it has none.
func IdempotencyKeyHeader(c *fiber.Ctx) string {
	return string([]byte(c.Get("Idempotency-Key")))
}
