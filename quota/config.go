package quota

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
)

// Limit is one quota: Max units of cost per Expiration.
type Limit struct {
	// Max is the number of units a key may take per Expiration: 1 to
	// 2^32-1, and for SlidingLog to 10,000. For TokenBucket it is the
	// refill rate, Max tokens per Expiration.
	Max int
	// Expiration is the window's length (for TokenBucket, the time Max
	// tokens take to refill): at least 1 ms, any length up to the longest
	// time.Duration. A fraction of a millisecond is rounded up.
	Expiration time.Duration
	// Burst is TokenBucket's capacity: 0 (the default) means Max. The
	// windows take none.
	Burst int
}

// PerSecond is max units per second.
func PerSecond(max int) Limit { return Limit{Max: max, Expiration: time.Second} }

// PerMinute is max units per minute.
func PerMinute(max int) Limit { return Limit{Max: max, Expiration: time.Minute} }

// PerHour is max units per hour.
func PerHour(max int) Limit { return Limit{Max: max, Expiration: time.Hour} }

// Config configures a Limiter. Only Limits is required.
type Config struct {
	// Algorithm decides under each limit: FixedWindow (the default),
	// SlidingWindow, TokenBucket or SlidingLog.
	Algorithm Algorithm

	// Limits are decided together: a request is admitted when every one
	// admits it, and counted under each; a request that one rejects is
	// counted under none. 1 to 4 limits, each with its own Expiration.
	Limits []Limit

	// Redis, when set, keeps every key's state in Redis: each take and
	// refund is one atomic Lua script call, so any number of processes
	// sharing the Redis (a plain, Sentinel failover, Cluster or Ring
	// client) admit exactly the limit between them.
	//
	// Limiters of one process on one Redis must differ in algorithm,
	// window or Name (see Name). Two clients count as one Redis when they
	// have the same Addr and DB (a Cluster or Ring client: the same
	// addresses), whatever their user; a client with a Dialer of its own,
	// or a Sentinel failover client, counts as a Redis of its own, since
	// its Addr does not say where it goes: limiters on two such clients
	// that reach one server keep apart only by their Names.
	//
	// Optional. Default: nil (state in this process, or in Storage)
	Redis goredis.UniversalClient

	// RedisStore, when set instead of Redis, is this module's
	// storage/redis Store to decide in, with its options (such as
	// WithoutPipelining); with Now set, its client at Now's clock, without
	// its other options. Its keys are those of Redis, and of a
	// middleware's Storage on the same Redis.
	//
	// Optional. Default: nil
	RedisStore *redis.Store

	// Storage, when set and Redis and RedisStore are not, keeps state
	// outside the process. A Storage on go-redis, one with a Conn()
	// redis.UniversalClient method (the *Storage of
	// gofiber/storage/redis/v3; a storage/redis Store, with its options),
	// is decided in Redis as Redis is, atomically, but on keys of its own:
	// releases before v1 read and wrote such a Storage through Get and
	// Set, in another layout (docs/redis.md, "Upgrading"). To share keys
	// with Redis, RedisStore or a middleware, use one of those. Any other
	// Storage is read, decided and written back under a lock of this
	// process: exact for one process, but processes sharing the store can
	// interleave and admit more than the limit together.
	//
	// Optional. Default: nil
	Storage Storage

	// BlockFor, when above 0, holds off a key that a take was rejected for
	// (one that could be admitted later, not a cost above the quota) for
	// this long after the rejection, whatever its counts: its takes are
	// rejected, with Remaining 0 and RetryAfter the time until the take
	// would be admitted: the block's end, or later if the limits (or
	// MinInterval) would still reject it then; Never for a cost above the
	// quota. A
	// brute-force login, say, then waits out the block, not just the
	// window. On Redis the block is kept with the key's counts, so every
	// replica holds it off; the deny cache answers it too. Refund,
	// Penalize and Reward neither start nor lift a block. At most a year.
	// Turning BlockFor or MinInterval on keeps the counts kept in Redis or
	// Storage; turning them off starts them afresh.
	//
	// Optional. Default: 0 (none)
	BlockFor time.Duration

	// MinInterval, when above 0, is the least time between two admitted
	// takes of a key (of a cost above 0): "and no two requests closer than
	// 200 ms". A take that comes sooner is rejected, with Remaining 0 and
	// RetryAfter the rest of the wait (or longer, when the limits have no
	// room for it by then), and counts nothing (with BlockFor,
	// it blocks the key as any rejection does). On Redis every replica
	// keeps it. It holds for every algorithm. At most a year.
	//
	// Optional. Default: 0 (none)
	MinInterval time.Duration

	// Lease, when above 0, lets this process decide a busy key's takes
	// from a share of the key's quota in Redis (or Storage), taken in one
	// call and kept for at most Lease, instead of one call per take. The
	// share is counted in the store when it is taken, so the processes
	// together never admit more than the limit; what a window's share does
	// not use goes back when its lease ends, and a token bucket's refills.
	// Keys of a few takes a lease are decided in the store as without it.
	// A process that dies holding a share strands its units until their
	// window ends (or they refill). A token bucket with Lease takes no
	// Refund, and no limiter with Lease a Reward (both return an error);
	// Penalize ends this process's share. Not with SlidingLog, BlockFor,
	// MinInterval, VaryMax or VaryExpiration, nor with Now on Redis (New
	// returns an error, in memory too); TakeUpTo and TakeIdempotent are
	// decided in the store. In memory it changes nothing. At most an hour;
	// a share is kept 900 ms at most whatever Lease says, so that an
	// operator's Reset or Block reaches every replica within a second.
	// See docs/leases.md.
	//
	// Optional. Default: 0 (a call per take)
	Lease time.Duration

	// VaryMax lets TakeWith set the first limit's Max per call (a plan, an
	// API key). Time is then kept in steps fit for the largest Max, 2^32-1.
	// SlidingLog takes none: New returns an error.
	//
	// Optional. Default: false
	VaryMax bool

	// VaryExpiration lets TakeWith set the first limit's Expiration per
	// call. A key's state under one window is kept apart from its state
	// under another (every key is stored with its window), so the windows
	// should come from a fixed set, such as one per plan: a window that
	// changes from call to call (the time left to a deadline) gives every
	// call a fresh count.
	//
	// Optional. Default: false
	VaryExpiration bool

	// Name tells apart limiters that share Redis or Storage with the same
	// algorithm and windows: limiters of one process that do so must each
	// have their own Name (New returns an error otherwise), or the same
	// Name to share one count. It holds no ':', '{' or '}'.
	//
	// Optional. Default: ""
	Name string

	// KeyPrefix begins every key in Redis or Storage.
	//
	// Optional. Default: "limiter:"
	KeyPrefix string

	// MaxKeys bounds the keys kept in memory, by this limiter's in-memory
	// state or FailFallback's: at the bound, a new key takes the place of
	// one that ends soon. A key takes about 64 bytes besides its length
	// under one limit, about 30 more for each further limit and about 25
	// more with BlockFor or MinInterval; under SlidingLog 8 more per unit of each limit's Max, and the keys
	// are also bounded so that the logs hold at most 256 MiB.
	//
	// Optional. Default: 1<<20
	MaxKeys int

	// FailurePolicy says what a take does when Redis or Storage fails or
	// its breaker is open: FailFallback (the default) decides in memory,
	// FailOpen admits uncounted, FailClosed rejects, FailError returns the
	// store's error (with no breaker: every take calls the store).
	FailurePolicy FailurePolicy

	// StorageTimeout bounds each call to Redis or Storage (at least 1 ms).
	//
	// Optional. Default: 100 ms
	StorageTimeout time.Duration

	// BreakerFailures is how many calls in a row must fail (time out, or
	// find the store out of reach or out of service) for the breaker to
	// open: calls then go to FailurePolicy without waiting on the store,
	// until a probe finds it back.
	//
	// Optional. Default: 5
	BreakerFailures int

	// BreakerCooldown is how long the breaker stays open before it probes
	// (at least 1 ms).
	//
	// Optional. Default: 500 ms
	BreakerCooldown time.Duration

	// OnStorageError receives failed calls to Redis or Storage as a
	// *StorageError: the first at once, then at most one a second with
	// the count in between; and warnings about the store's settings.
	//
	// Optional. Default: nil (the same reports, at the same pace, and the
	// warnings go to the standard logger, log.Print)
	OnStorageError func(err error)

	// DenyCacheKeys is how many keys a rejection by Redis or Storage is
	// remembered for in this process, so that the same request is
	// rejected here until its RetryAfter, without a call: for 900 ms at
	// most (then the store decides again), so that an operator's Reset
	// reaches every replica within a second.
	//
	// Optional. Default: 8192
	DenyCacheKeys int

	// DisableDenyCache turns the deny cache off.
	//
	// Optional. Default: false
	DisableDenyCache bool

	// DisableRedisCheck keeps New from calling Redis. By default New makes
	// one call to a Redis it has not had an answer from, and returns an
	// error (wrapping ErrRedisRefused) when Redis answers but refuses it:
	// a wrong or missing password, an ACL user without a command the
	// limiter runs, a DB the server does not have. A Redis out of reach
	// is no error (it is reported as a failed call is). New waits for the
	// call 1.5 s at most, once a minute per client. With the check
	// off, such a refusal shows only as failed calls, answered by
	// FailurePolicy.
	//
	// Optional. Default: false
	DisableRedisCheck bool

	// IdempotencyTTL is how long TakeIdempotent keeps a request's first Result
	// for its repeats, at most 365 days.
	//
	// Optional. Default: 1 hour
	IdempotencyTTL time.Duration

	// IdempotencyKeys bounds the requests whose first Result TakeIdempotent
	// keeps in this process (in memory and with Storage; on Redis, Redis
	// keeps them, each for IdempotencyTTL), about 400 bytes each, spread
	// over 64 shards (so at least 64): past it a shard's oldest go, and a
	// repeat of one counts again. At most 2^24.
	//
	// Optional. Default: 8192
	IdempotencyKeys int

	// MaxWaiting bounds the takes of this Limiter that wait for their
	// turn at once in this process (Reserve and Wait with a delay above
	// 0): a take beyond it is decided as one that may not wait, admitted
	// now or rejected. Each waiter is its caller's goroutine, asleep.
	//
	// Optional. Default: 1024 (DefaultMaxWaiting)
	MaxWaiting int

	// Now is the clock. By default, in memory, a monotonic clock (a
	// request's own start time when the context is a fasthttp request);
	// on Redis, the server's TIME, so that processes with skewed clocks
	// agree; with Storage, the wall clock. When set, it serves every
	// backend: Redis then gets the caller's time.
	//
	// Optional. Default: nil
	Now func() time.Time

	// clock is Now in Unix ms, or nil.
	clock func() int64
}

// Defaults of Config's optional fields.
const (
	DefaultKeyPrefix       = "limiter:"
	DefaultMaxKeys         = 1 << 20
	DefaultStorageTimeout  = 100 * time.Millisecond
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 500 * time.Millisecond
	DefaultDenyCacheKeys   = 8192
)

// The limit of a middleware of this module (Fiber v2, Fiber v3, net/http)
// whose Config sets neither Max, Expiration nor Limits: 5 requests a
// minute, as Fiber's own limiter. A quota.Config has no default limit:
// its Limits are required.
const (
	DefaultMax        = 5
	DefaultExpiration = time.Minute
)

// fill applies the defaults to cfg and checks it.
func (cfg *Config) fill() error {
	if cfg.Algorithm == 0 {
		cfg.Algorithm = FixedWindow
	}
	if cfg.Redis != nil && cfg.RedisStore != nil {
		return errors.New("limiter: Redis and RedisStore are both set; set one")
	}
	if cfg.Algorithm > SlidingLog {
		return fmt.Errorf("limiter: Algorithm is %d; it must be FixedWindow, SlidingWindow, TokenBucket or SlidingLog", cfg.Algorithm)
	}
	if cfg.Algorithm == SlidingLog && cfg.VaryMax {
		return errors.New("limiter: VaryMax is set with SlidingLog, whose keys keep one entry per unit of Max; give each Max its own Limiter, or use another Algorithm")
	}
	if err := checkLimits(cfg.Limits, cfg.Algorithm); err != nil {
		return err
	}
	if (cfg.VaryMax || cfg.VaryExpiration) && len(cfg.Limits) > 1 {
		return errors.New("limiter: VaryMax or VaryExpiration is set with several Limits; they vary a single limit")
	}
	for _, f := range [...]struct {
		name string
		d    time.Duration
	}{{"BlockFor", cfg.BlockFor}, {"MinInterval", cfg.MinInterval}, {"IdempotencyTTL", cfg.IdempotencyTTL}} {
		if f.d < 0 || f.d > maxBlock {
			return fmt.Errorf("limiter: %s is %v; it must be 0 (none) or up to %v", f.name, f.d, maxBlock)
		}
	}
	if err := cfg.checkLease(); err != nil {
		return err
	}
	for _, f := range [...]struct {
		name string
		v    int
	}{{"MaxKeys", cfg.MaxKeys}, {"BreakerFailures", cfg.BreakerFailures}, {"DenyCacheKeys", cfg.DenyCacheKeys}, {"MaxWaiting", cfg.MaxWaiting}} {
		if f.v < 0 {
			return fmt.Errorf("limiter: %s is %d; it must be >= 0 (0 means the default)", f.name, f.v)
		}
	}
	if cfg.IdempotencyKeys < 0 || cfg.IdempotencyKeys > maxIdempotencyKeys {
		return fmt.Errorf("limiter: IdempotencyKeys is %d; it must be 0 (the default) to %d", cfg.IdempotencyKeys, maxIdempotencyKeys)
	}
	if cfg.DenyCacheKeys > maxDenyCacheKeys {
		return fmt.Errorf("limiter: DenyCacheKeys is %d; it must be at most %d (it is allocated at New)", cfg.DenyCacheKeys, maxDenyCacheKeys)
	}
	if cfg.BreakerFailures > math.MaxInt32 {
		return fmt.Errorf("limiter: BreakerFailures is %d; it must be at most %d", cfg.BreakerFailures, math.MaxInt32)
	}
	for _, f := range [...]struct {
		name   string
		d, def time.Duration
	}{{"StorageTimeout", cfg.StorageTimeout, DefaultStorageTimeout}, {"BreakerCooldown", cfg.BreakerCooldown, DefaultBreakerCooldown}} {
		if f.d < 0 || (f.d > 0 && f.d < time.Millisecond) {
			return fmt.Errorf("limiter: %s is %v; it must be 0 (default %v) or at least 1ms", f.name, f.d, f.def)
		}
	}
	if cfg.FailurePolicy > FailError {
		return fmt.Errorf("limiter: FailurePolicy is %d; it must be FailFallback, FailOpen, FailClosed or FailError", cfg.FailurePolicy)
	}
	if i := strings.IndexAny(cfg.Name, ":{}"); i >= 0 {
		return fmt.Errorf("limiter: Name %q contains %q; it must not contain ':', '{' or '}' (it is a part of every key in Storage, and braces would make it a Redis Cluster hash tag)", cfg.Name, cfg.Name[i])
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.StorageTimeout == 0 {
		cfg.StorageTimeout = DefaultStorageTimeout
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerCooldown == 0 {
		cfg.BreakerCooldown = DefaultBreakerCooldown
	}
	if cfg.DenyCacheKeys == 0 {
		cfg.DenyCacheKeys = DefaultDenyCacheKeys
	}
	if cfg.IdempotencyTTL == 0 {
		cfg.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if cfg.IdempotencyKeys == 0 {
		cfg.IdempotencyKeys = DefaultIdempotencyKeys
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if now := cfg.Now; now != nil && cfg.clock == nil {
		cfg.clock = func() int64 { return now().UnixMilli() }
	}
	return nil
}

// checkLimits checks the limits of a limiter of alg.
func checkLimits(ls []Limit, alg Algorithm) error {
	if len(ls) == 0 {
		return errors.New("limiter: Limits is empty; give at least one limit")
	}
	if len(ls) > maxLimits {
		return fmt.Errorf("limiter: Limits has %d limits; give at most %d", len(ls), maxLimits)
	}
	for i, l := range ls {
		field := "Limits[" + fmt.Sprint(i) + "]."
		switch {
		case l.Max <= 0:
			return fmt.Errorf("limiter: %sMax is %d; it must be >= 1", field, l.Max)
		case alg == SlidingLog && l.Max > MaxLogLimit:
			return fmt.Errorf("limiter: %sMax is %d; SlidingLog keeps one entry per unit of Max and takes at most %d (for larger limits, SlidingWindow estimates the same window in two counters)", field, l.Max, MaxLogLimit)
		case int64(l.Max) > maxLimit:
			return fmt.Errorf("limiter: %sMax is %d; it must be at most %d (below 2^32)", field, l.Max, int64(maxLimit))
		case l.Expiration < time.Millisecond:
			return fmt.Errorf("limiter: %sExpiration is %v; it must be at least 1ms", field, l.Expiration)
		case l.Burst < 0:
			return fmt.Errorf("limiter: %sBurst is %d; it must be >= 0 (0 means the default)", field, l.Burst)
		case int64(l.Burst) > maxLimit:
			return fmt.Errorf("limiter: %sBurst is %d; it must be at most %d (below 2^32)", field, l.Burst, int64(maxLimit))
		case l.Burst != 0 && alg != TokenBucket:
			return fmt.Errorf("limiter: %sBurst is %d but only TokenBucket uses it; remove it or use TokenBucket", field, l.Burst)
		}
		for j, o := range ls[:i] {
			if timestep.Millis(o.Expiration) == timestep.Millis(l.Expiration) {
				return fmt.Errorf("limiter: Limits[%d] and Limits[%d] have the same Expiration (%v); give each limit its own window", j, i, l.Expiration)
			}
		}
	}
	if alg == SlidingLog {
		return checkLogEntries(ls)
	}
	return nil
}

// limitsOf returns the rules of cfg's limits (checked). Each rule's time
// step fits its largest quota: with VaryMax, the largest a Max can be.
func limitsOf(cfg *Config) limits {
	ls := limits{n: len(cfg.Limits)}
	if cfg.BlockFor > 0 {
		ls.block = max(1, timestep.Millis(cfg.BlockFor))
	}
	if cfg.MinInterval > 0 {
		ls.gap = max(1, timestep.Millis(cfg.MinInterval))
	}
	for i, l := range cfg.Limits {
		limit, burst := int64(l.Max), int64(l.Max)
		if l.Burst > 0 {
			burst = int64(l.Burst)
		}
		most := max(limit, burst)
		if cfg.VaryMax {
			most = maxLimit
		}
		ls.r[i] = newRule(limit, burst, l.Expiration, most)
	}
	return ls
}

// checkNil returns an error, naming the field, when client or storage is
// a nil pointer (or map, ...) of some type: a value that is set, but on
// which every call would panic.
func checkNil(client goredis.UniversalClient, storage Storage) error {
	for _, f := range [...]struct {
		name string
		v    any
	}{{"Redis", client}, {"Storage", storage}} {
		if f.v != nil && isNil(f.v) {
			return fmt.Errorf("limiter: %s is a nil %T; make it with its package's New", f.name, f.v)
		}
	}
	return nil
}

// isNil tells whether v holds a nil pointer, map, slice, channel or func.
func isNil(v any) bool {
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// maxLease is the longest Config.Lease.
const maxLease = time.Hour

// checkLease checks Lease against the rest of cfg: a share is spent on
// this replica alone, so rules that every replica must see of each take
// (a block, a gap, a Max or window of the take's own) cannot hold under it.
func (cfg *Config) checkLease() error {
	if cfg.Lease == 0 {
		return nil
	}
	if cfg.Lease < time.Millisecond || cfg.Lease > maxLease {
		return fmt.Errorf("limiter: Lease is %v; it must be 0 (none) or 1ms to %v", cfg.Lease, maxLease)
	}
	var with string
	switch {
	case cfg.Algorithm == SlidingLog:
		with = "Algorithm SlidingLog (a share's units would be logged at the grant, not when they are spent)"
	case cfg.BlockFor > 0:
		with = "BlockFor (a block set in Redis would not stop the shares other replicas hold)"
	case cfg.MinInterval > 0:
		with = "MinInterval (the takes of a share are spaced on one replica only)"
	case cfg.VaryMax:
		with = "VaryMax (a share is taken under one Max)"
	case cfg.VaryExpiration:
		with = "VaryExpiration (a share is taken under one window)"
	default:
		return nil
	}
	return fmt.Errorf("limiter: Lease is set with %s; set one of them", with)
}
