package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

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
	// Optional. Default: nil (state in this process, or in Storage)
	Redis goredis.UniversalClient

	// RedisStore, when set instead of Redis, is the Lua store to decide
	// in: this module's storage/redis Store, with its options (such as
	// WithoutPipelining). With Now set, its client is used with Now's
	// clock, and its other options are not carried over.
	//
	// Optional. Default: nil
	RedisStore *redis.Store

	// Storage, when set and Redis is not, keeps state in any key-value
	// store by reading it, deciding and writing it back under a lock of
	// this process: exact for one process, but processes sharing the store
	// can interleave and admit more than the limit together. A storage on
	// Redis given here is used that way too: for the exact Lua store, set
	// Redis to its client (the middlewares detect such a storage by its
	// Conn method and do so).
	//
	// Optional. Default: nil
	Storage Storage

	// BlockFor, when above 0, holds off a key that a take was rejected for
	// (one that could be admitted later, not a cost above the quota) for
	// this long after the rejection, whatever its counts: its takes are
	// rejected, with Remaining 0 and RetryAfter the rest of the block. A
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
	// RetryAfter the rest of the wait, and counts nothing (with BlockFor,
	// it blocks the key as any rejection does). On Redis every replica
	// keeps it. It holds for every algorithm. At most a year.
	//
	// Optional. Default: 0 (none)
	MinInterval time.Duration

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
	// FailOpen admits uncounted, FailClosed rejects.
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
	// Optional. Default: nil (warnings go to the standard logger)
	OnStorageError func(err error)

	// DenyCacheKeys is how many keys a rejection by Redis or Storage is
	// remembered for in this process, so that the same request is
	// rejected here until its RetryAfter, without a call.
	//
	// Optional. Default: 8192
	DenyCacheKeys int

	// DisableDenyCache turns the deny cache off.
	//
	// Optional. Default: false
	DisableDenyCache bool

	// IdempotencyTTL is how long TakeOnce keeps a request's first Result
	// for its repeats, at most 365 days.
	//
	// Optional. Default: 1 hour
	IdempotencyTTL time.Duration

	// IdempotencyKeys bounds the requests whose first Result TakeOnce
	// keeps in this process (in memory and with Storage; on Redis, Redis
	// keeps them, each for IdempotencyTTL), about 400 bytes each, spread
	// over 64 shards (so at least 64): past it a shard's oldest go, and a
	// repeat of one counts again. At most 2^24.
	//
	// Optional. Default: 8192
	IdempotencyKeys int

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

// Storage is a key-value store that a Limiter may keep its state in:
// Fiber's storages (v2 and v3) have these methods. Get returns nil, nil
// for a missing key; Set keeps val for exp (0: for good).
type Storage interface {
	Get(key string) ([]byte, error)
	Set(key string, val []byte, exp time.Duration) error
	Delete(key string) error
}

// Limiter takes and refunds cost for keys under its limits. It is safe
// for concurrent use.
type Limiter struct {
	alg        Algorithm
	base       limits
	fixedBurst bool // Burst was set: TakeWith leaves the bucket's capacity alone
	varyMax    bool
	// varyExpiration: TakeWith may set the first limit's window, and keys
	// carry their window (see storedKey).
	varyExpiration bool
	baseWindow     int64 // the first limit's window as configured, in ms
	memory         *manager
	store          *guardedStore
	once           *onceCache // TakeOnce's records, but on Redis
	redisOnce      bool       // TakeOnce's records are in Redis
	backend        string
	windows        [maxLimits]time.Duration // each limit's Decision.Window under base
}

// New returns a Limiter for cfg, or an error that names the field of cfg
// that is invalid.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return newLimiter(cfg)
}

// newLimiter builds a Limiter for cfg (defaults filled, checked).
func newLimiter(cfg Config) (*Limiter, error) {
	l := &Limiter{
		alg:            cfg.Algorithm,
		base:           limitsOf(&cfg),
		fixedBurst:     len(cfg.Limits) == 1 && cfg.Limits[0].Burst > 0,
		varyMax:        cfg.VaryMax,
		varyExpiration: cfg.VaryExpiration,
		baseWindow:     timestep.Millis(cfg.Limits[0].Expiration),
	}
	n := l.base.n
	for i := range n {
		l.windows[i] = policyWindow(l.alg, l.base.r[i])
	}
	prefix := keyPrefix(&cfg, l.alg, &l.base)
	var identity any
	switch {
	case cfg.RedisStore != nil || cfg.Redis != nil:
		backend := newRedisBackend(cfg.Redis, cfg.RedisStore, l.alg, prefix, &cfg)
		l.store = newGuardedStore(backend, honorsContext(backend.store.Conn()), &cfg, l.alg, n)
		l.backend, identity = "redis", backend.store.Conn()
	case cfg.Storage != nil:
		clock := cfg.clock
		if clock == nil {
			clock = wallMillis
		}
		l.store = newGuardedStore(newStorageBackend(cfg.Storage, l.alg, prefix, clock), false, &cfg, l.alg, n)
		l.backend, identity = "storage", cfg.Storage
	default:
		l.memory = newManager(l.alg, l.base.states(), memoryKeys(l.alg, &l.base, cfg.MaxKeys), cfg.clock)
		if l.alg == SlidingLog {
			l.memory.useLogs(&l.base)
		}
		l.backend = "memory"
	}
	if identity != nil {
		if err := claimIdentity(l, identity, prefix, cfg.Name != ""); err != nil {
			return nil, err
		}
	}
	if l.store != nil {
		l.store.ownedBy(l) // its probes end when l is gone
	}
	l.redisOnce = l.backend == "redis"
	if !l.redisOnce {
		clock := cfg.clock
		if clock == nil {
			clock = wallMillis
		}
		l.once = newOnceCache(cfg.IdempotencyTTL, cfg.IdempotencyKeys, clock)
	}
	return l, nil
}

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
	for _, f := range [...]struct {
		name string
		v    int
	}{{"MaxKeys", cfg.MaxKeys}, {"BreakerFailures", cfg.BreakerFailures}, {"DenyCacheKeys", cfg.DenyCacheKeys}} {
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
	if cfg.FailurePolicy > FailClosed {
		return fmt.Errorf("limiter: FailurePolicy is %d; it must be FailFallback, FailOpen or FailClosed", cfg.FailurePolicy)
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

// Take takes cost units (>= 0) for key under every limit: the Result
// says whether they were admitted and counted. A rejected take counts
// nothing. The error is not nil only for a negative cost: when Redis or
// Storage fails, FailurePolicy answers (see Result.Source).
func (l *Limiter) Take(ctx context.Context, key string, cost int) (Result, error) {
	var res Result
	err := l.TakeInto(ctx, key, cost, &res)
	return res, err
}

// TakeInto is Take with the Result written to *res, which it overwrites,
// rather than returned: a Result holds each limit's Decision, a few
// hundred bytes, and in memory a caller that keeps one per request (a
// middleware, say) spares copying it. On an error *res is the zero
// Result.
func (l *Limiter) TakeInto(ctx context.Context, key string, cost int, res *Result) error {
	if cost < 0 {
		*res = Result{}
		return fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	var err error
	switch {
	case l.varyExpiration:
		*res, err = l.TakeWith(ctx, key, cost, Limit{})
	case l.memory != nil:
		*res = Result{}
		l.memory.takeInto(ctx, key, &l.base, int64(cost), res)
		l.finish(res, &l.base)
	default:
		*res, err = l.takeStored(ctx, key, l.base, int64(cost))
	}
	return err
}

// TakeOnce is Take made once per request: id names the request (its
// Idempotency-Key header, say), and a take of the same key and id within
// Config.IdempotencyTTL of an admitted one gets that take's Result again,
// with Source SourceRepeat, and counts nothing; so does a take of it made
// at the same time. Only admissions by the backend are kept: a rejected
// request counted nothing, and its retry is decided afresh; nor is a
// failure policy's answer kept. A request answers at most 8 repeats: the
// next take of it counts as a new request, so that one id reused for good
// spends quota as any request does. On Redis the check and the take are
// one script call, exact across replicas; in memory and with Storage the
// Results are kept in this process (see Config.IdempotencyKeys). An empty
// id is a plain Take.
func (l *Limiter) TakeOnce(ctx context.Context, key, id string, cost int) (Result, error) {
	if id == "" {
		return l.Take(ctx, key, cost)
	}
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	request := requestIDOf(key, id)
	if !l.redisOnce {
		var err error
		res := l.once.take(request, int64(cost), func() Result {
			var res Result
			res, err = l.Take(ctx, key, cost)
			return res
		})
		return res, err
	}
	ls := l.base
	res := l.takeOnceStored(ctx, l.storedKey(nil, &ls, key), &request, &ls, int64(cost))
	l.finish(&res, &ls)
	return res, nil
}

// RefundOnce is Refund for a take that TakeOnce made for request id: it
// also makes the request's record answer no more repeats, so that a retry
// of a request whose cost was given back is decided, and counted, afresh
// (else a refunded request's id would pass its retries for free). A take
// whose record has answered repeats already (retries that came while the
// first request was still being handled) is not given back: the repeats
// were served on it. Nor is one whose record the store could not drop. A
// repeat (SourceRepeat) counted nothing: it is given nothing back, and the
// record stays.
func (l *Limiter) RefundOnce(ctx context.Context, key, id string, cost int, taken *Result) (Result, error) {
	if id != "" && taken.Allowed() && taken.source == SourceBackend && cost > 0 {
		request := requestIDOf(key, id)
		var refundable bool
		if l.redisOnce {
			ls := l.base
			refundable = l.store.forgetOnce(ctx, l.storedKey(nil, &ls, key), request.record())
		} else {
			refundable = l.once.forget(request)
		}
		if !refundable {
			return *taken, nil
		}
	}
	return l.Refund(ctx, key, cost, taken)
}

// TakeWith is Take with the first limit replaced, for this call, by
// first: its Max when not 0 (needs Config.VaryMax; above 2^32-1 counts as
// 2^32-1), its Expiration when not 0 (needs Config.VaryExpiration), and
// its Burst when not 0 (TokenBucket; needs Config.VaryMax), else the
// configured Burst, or Max when none is. A plan's quota, say, or Fiber
// v3's MaxFunc and ExpirationFunc.
func (l *Limiter) TakeWith(ctx context.Context, key string, cost int, first Limit) (Result, error) {
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	ls, err := l.varied(first)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if l.memory != nil {
		res, err = l.takeMemory(ctx, key, &ls, int64(cost))
	} else {
		res, err = l.takeStored(ctx, key, ls, int64(cost))
	}
	res.varied, res.first = true, ls.r[0]
	return res, err
}

// takeMemory takes cost for key under ls in memory.
func (l *Limiter) takeMemory(ctx context.Context, key string, ls *limits, cost int64) (Result, error) {
	var buf [keyRoom]byte
	res, err := l.memory.take(ctx, l.storedKey(buf[:0], ls, key), ls, cost)
	l.finish(&res, ls)
	return res, err
}

// varied is the limits with the first one changed as first says.
func (l *Limiter) varied(first Limit) (limits, error) {
	ls := l.base
	r := &ls.r[0]
	switch {
	case first.Max < 0 || first.Burst < 0 || first.Expiration < 0:
		return ls, fmt.Errorf("limiter: TakeWith's limit %+v has a negative field", first)
	case first.Max != 0 && !l.varyMax && int64(first.Max) != r.limit:
		return ls, errors.New("limiter: TakeWith sets Max, which needs Config.VaryMax")
	case first.Expiration != 0 && !l.varyExpiration && timestep.Millis(first.Expiration) != l.baseWindow:
		return ls, errors.New("limiter: TakeWith sets Expiration, which needs Config.VaryExpiration")
	case first.Burst != 0 && l.alg != TokenBucket:
		return ls, errors.New("limiter: TakeWith sets Burst, which only TokenBucket uses")
	case first.Burst != 0 && !l.varyMax && int64(first.Burst) != r.burst:
		// The time step was fitted for the configured quota, which a larger
		// Burst could overflow.
		return ls, errors.New("limiter: TakeWith sets Burst, which needs Config.VaryMax")
	}
	limit, burst := r.limit, r.burst
	if first.Max != 0 {
		limit = min(int64(first.Max), maxLimit)
		if !l.fixedBurst {
			burst = limit
		}
	}
	if first.Burst != 0 {
		burst = min(int64(first.Burst), maxLimit)
	}
	if first.Expiration != 0 && timestep.Millis(first.Expiration) != l.baseWindow {
		most := max(limit, burst)
		if l.varyMax {
			most = maxLimit
		}
		*r = newRule(limit, burst, first.Expiration, most)
		return ls, nil
	}
	r.limit, r.burst = limit, burst
	return ls, nil
}

// keyRoom is the room on the stack for a key with its window (see
// storedKey); longer keys allocate.
const keyRoom = 128

// storedKey is the key a backend keeps key's state under. With
// VaryExpiration, a state is kept apart for each window, as a state means
// something only under its own: every key is "<window>:<key>" (the window
// as in the Redis key prefix, which holds no ':'), built in dst when it
// fits. The result is valid while dst is: backends copy what they keep.
func (l *Limiter) storedKey(dst []byte, ls *limits, key string) string {
	if !l.varyExpiration {
		return key
	}
	r := &ls.r[0]
	dst = timestep.AppendWindow(dst, r.window*r.stepMillis())
	dst = append(append(dst, ':'), key...)
	return unsafe.String(unsafe.SliceData(dst), len(dst))
}

// Refund credits back cost units of a take that admitted them (taken,
// as Take, TakeInto or TakeWith gave it), in the window it counted them in, and
// returns the state that leaves (as a take of cost 0 would). A refund of
// a take that was rejected, or answered by the deny cache or FailOpen,
// changes nothing. A store that fails the refund loses the credit: the
// error says so.
func (l *Limiter) Refund(ctx context.Context, key string, cost int, taken *Result) (Result, error) {
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	if !taken.Allowed() || taken.source == SourceFailOpen || taken.source == SourceRepeat || cost == 0 {
		return *taken, nil
	}
	ls := l.base
	if taken.varied {
		ls.r[0] = taken.first
	}
	credit := *taken
	credit.adjust = refundTaken // whatever Result it is given
	var res Result
	if l.memory != nil {
		var buf [keyRoom]byte
		res, _ = l.memory.refund(ctx, l.storedKey(buf[:0], &ls, key), &ls, int64(cost), &credit)
	} else {
		var ok bool
		if res, ok = l.refundStored(ctx, key, ls, int64(cost), credit); !ok {
			return *taken, errRefundLost
		}
	}
	l.finish(&res, &ls)
	res.varied, res.first = taken.varied, taken.first
	return res, nil
}

// TakeUpTo takes as much of cost units (>= 0) for key as every limit has
// room for now, and returns how much that was: a batch endpoint or a job
// queue that takes what it can. When no limit has room for one unit, it
// is a rejected take of 1, whose RetryAfter says when one unit fits; for
// cost 0, an admitted take of 0. The Result is the take's, of the granted
// units, for Refund. On Redis the room and the take are one atomic call.
// When Redis or Storage fails, FailurePolicy answers: FailOpen grants all
// of cost, FailClosed none.
func (l *Limiter) TakeUpTo(ctx context.Context, key string, cost int) (granted int, res Result, err error) {
	if cost < 0 {
		return 0, Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	ls := l.base
	ls.upTo = true
	if l.memory != nil {
		res, err = l.takeMemory(ctx, key, &ls, int64(cost))
	} else {
		res, err = l.takeStored(ctx, key, ls, int64(cost))
	}
	if err != nil {
		return 0, res, err
	}
	switch res.source {
	case SourceFailOpen:
		return cost, res, nil
	case SourceFailClosed, SourceDenyCache:
		return 0, res, nil
	}
	return int(res.granted), res, nil
}

// Penalize counts cost units (>= 0) against key under every limit, outside
// a request and whether or not they fit: a failed login that should cost
// 5, say. Each limit counts at most its whole quota (Max, or Burst for the
// token bucket), so a key is never held off for longer than a spent quota
// holds it. The Result describes the state it leaves, as a take of cost 0
// would see it. With VaryMax or VaryExpiration, the configured Max and
// Expiration apply. On Redis or Storage it is one atomic call; when that
// fails, the error says so, and the penalty may or may not have been
// counted (FailurePolicy decides takes, not adjustments).
func (l *Limiter) Penalize(ctx context.Context, key string, cost int) (Result, error) {
	return l.adjust(ctx, key, cost, penalty)
}

// Reward gives cost units (>= 0) back to key under every limit, from what
// it has spent now, whichever request or window counted them: a solved
// captcha, say. It never gives back more than is spent. The Result is as
// Penalize's, and so are the configured limits and the errors.
func (l *Limiter) Reward(ctx context.Context, key string, cost int) (Result, error) {
	return l.adjust(ctx, key, cost, reward)
}

// adjust runs a penalty or a reward of cost for key.
func (l *Limiter) adjust(ctx context.Context, key string, cost int, adj adjustment) (Result, error) {
	name := "penalize"
	if adj == reward {
		name = "reward"
	}
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: %s: cost is %d; it must be >= 0", name, cost)
	}
	ls := l.base
	v := Result{n: ls.n, adjust: adj}
	var res Result
	if l.memory != nil {
		var buf [keyRoom]byte
		res, _ = l.memory.refund(ctx, l.storedKey(buf[:0], &ls, key), &ls, int64(cost), &v)
	} else {
		var ok bool
		if res, ok = l.refundStored(ctx, key, ls, int64(cost), v); !ok {
			return Result{}, fmt.Errorf("limiter: %s: storage failed; it may not have been made", name)
		}
	}
	l.finish(&res, &ls)
	return res, nil
}

// errRefundLost is Refund's error when the store could not take the credit.
var errRefundLost = errors.New("limiter: refund: storage failed; the credit is lost")

// takeStored and refundStored call the store with copies of the call's
// limits and result, which a call that outlives its deadline may still
// read.
func (l *Limiter) takeStored(ctx context.Context, key string, ls limits, cost int64) (Result, error) {
	key = l.storedKey(nil, &ls, key)
	res := l.store.take(ctx, key, &ls, cost)
	l.finish(&res, &ls)
	return res, nil
}

func (l *Limiter) refundStored(ctx context.Context, key string, ls limits, cost int64, v Result) (Result, bool) {
	key = l.storedKey(nil, &ls, key)
	return l.store.refund(ctx, key, &ls, cost, &v)
}

// finish fills in what every Result carries besides the decision: each
// limit's Window.
func (l *Limiter) finish(res *Result, ls *limits) {
	res.n = ls.n
	for i := range ls.n {
		res.each[i].Window = l.windows[i]
	}
	if ls != &l.base {
		res.each[0].Window = policyWindow(l.alg, ls.r[0])
	}
}

// Expiration is the window of limit i as res was decided under: as
// configured, or as TakeWith set it, rounded up to whole milliseconds and
// to the limit's time step.
func (l *Limiter) Expiration(res *Result, i int) time.Duration {
	r := l.base.r[i]
	if i == 0 && res.varied {
		r = res.first
	}
	return r.span(r.window)
}

// Backend names where the limiter keeps its state: "memory", "redis" or
// "storage".
func (l *Limiter) Backend() string { return l.backend }

// Algorithm is the limiter's algorithm.
func (l *Limiter) Algorithm() Algorithm { return l.alg }

// wallMillis is Unix time in ms, for state shared through a store.
func wallMillis() int64 { return time.Now().UnixMilli() }
