package quota

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/timestep"
)

// Limiter takes and refunds cost for keys under its limits. It is safe
// for concurrent use.
type Limiter struct {
	alg        Algorithm
	base       limits
	fixedBurst bool // Burst was set: TakeWith leaves the bucket's capacity alone
	varyMax    bool
	// varyExpiration: TakeWith may set the first limit's window, and keys
	// carry their window (see windowedKey).
	varyExpiration bool
	baseWindow     int64 // the first limit's window as configured, in ms
	// decider makes every take and adjustment: the in-memory manager, or
	// the guarded store over Redis or Storage.
	decider decider
	// memory is the decider when it is the in-memory manager, for
	// TakeInto (see there); nil otherwise.
	memory *manager
	// TakeIdempotent's records are kept by one of these: records, in this
	// process (in memory and with Storage), or recordStore, the guarded
	// Redis store, beside each key's state.
	records     *idempotencyCache
	recordStore *guardedStore
	// guard is the guarded store (Redis or Storage), nil in memory; leases
	// the leased store in front of it, with Lease.
	guard   *guardedStore
	leases  *leasedStore
	backend string                   // DecisionEvent.Backend
	name    string                   // DecisionEvent.Name: Config.Name
	windows [maxLimits]time.Duration // each limit's Decision.Window under base

	// waiting counts the Reservations that hold a waiting place, up to
	// maxWaiting (Config.MaxWaiting); longestDelay bounds Reserve's
	// maxDelay (longestDelayOf).
	waiting      atomic.Int64
	maxWaiting   int64
	longestDelay time.Duration
}

// decider is where a Limiter's takes and adjustments are made: the
// in-memory manager, or a guardedStore in front of Redis or a Storage.
// Unlike a backend it never fails a take (the guarded store answers a
// failed call with the failure policy), and it is given the client's key:
// it adds the window itself when keys carry one (windowedKey), so that the
// manager puts that key together on its stack.
//
// The limits and the Results go by value: the compiler moves to the heap
// whatever a pointer given to an interface method points to, which would
// cost the in-memory path an allocation a call (the Result of a caller's
// stack, the limits of TakeWith): TestMemoryCallsAllocateNothing.
type decider interface {
	// takeKey takes cost units for key under ls. Its error, under
	// FailError only, is that of the store's failed call.
	takeKey(ctx context.Context, key string, ls limits, cost int64) (Result, error)
	// adjustKey applies v.adjust of cost units to key: the refund of the
	// take that returned v, or a penalty or a reward. It returns the state
	// that leaves, or the error that lost the adjustment.
	adjustKey(ctx context.Context, key string, ls limits, cost int64, v Result) (Result, error)
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
		maxWaiting:     int64(cfg.MaxWaiting),
		name:           cfg.Name,
	}
	l.longestDelay = longestDelayOf(&l.base)
	n := l.base.n
	for i := range n {
		l.windows[i] = policyWindow(l.alg, l.base.r[i])
	}
	// A middleware of this module hands its Storage over marked, and is
	// decided on the keys of Redis and RedisStore; a Storage on go-redis
	// given to quota directly is decided on keys of its own.
	handed, ok := cfg.Storage.(redisengine.Handed)
	if ok {
		cfg.Storage = handed.Storage
	}
	if err := checkNil(cfg.Redis, cfg.Storage); err != nil {
		return nil, err
	}
	lua, field := cfg.Storage, "Storage"
	if cfg.RedisStore != nil {
		lua, field = cfg.RedisStore, "RedisStore"
	}
	if err := checkConn(cfg.Redis, lua, field); err != nil {
		return nil, err
	}
	prefix := keyPrefix(&cfg, l.alg, &l.base, !ok && cfg.Redis == nil && cfg.RedisStore == nil && onRedis(cfg.Storage))
	var identity any
	var guard *guardedStore
	switch {
	case cfg.Redis != nil || onRedis(lua):
		if cfg.Lease > 0 && cfg.clock != nil {
			return nil, errors.New("limiter: Lease is set with Now on Redis; a lease is timed by this process's clock, which must be the one Redis decides by: leave Now unset (Redis's own clock)")
		}
		backend := newRedisBackend(cfg.Redis, lua, l.alg, prefix, &cfg)
		guard = newGuardedStore(backend, honorsContext(backend.engine.Conn()), &cfg, l.alg, n)
		if cfg.Redis != nil {
			field = "Redis"
		}
		if !cfg.DisableRedisCheck {
			if err := guard.checkRedis(backend, field); err != nil {
				guard.end()
				return nil, err
			}
		}
		l.backend, identity = "redis", backend.engine.Conn()
		l.recordStore = guard
	case cfg.Storage != nil:
		clock := cfg.clock
		if clock == nil {
			clock = wallMillis
		}
		guard = newGuardedStore(newStorageBackend(cfg.Storage, l.alg, prefix, clock), false, &cfg, l.alg, n)
		l.backend, identity = "storage", cfg.Storage
	default:
		l.memory = newManager(l.alg, l.base.states(), memoryKeys(l.alg, &l.base, cfg.MaxKeys), cfg.clock)
		l.memory.windowed = cfg.VaryExpiration
		if l.alg == SlidingLog {
			l.memory.useLogs(&l.base)
		}
		l.decider, l.backend = l.memory, "memory"
	}
	if identity != nil {
		if err := claimIdentity(l, guard.warn, identity, prefix, cfg.Name != ""); err != nil {
			return nil, err
		}
	}
	if guard != nil {
		l.decider, l.guard = guard, guard
		guard.ownedBy(l) // its probes end when l is gone
		if cfg.Lease > 0 {
			l.leases = newLeasedStore(guard, l.base, l.alg, cfg.Lease, cfg.MaxKeys)
			l.decider = l.leases
			if guard.deny != nil {
				// A rejection stands for a lease at most: by then the
				// shares out when it was made have come back.
				guard.deny.most = min(guard.deny.most, l.leases.lease)
			}
		}
	}
	if l.recordStore == nil {
		clock := cfg.clock
		if clock == nil {
			clock = wallMillis
		}
		l.records = newIdempotencyCache(cfg.IdempotencyTTL, cfg.IdempotencyKeys, clock)
	}
	return l, nil
}

// Take takes cost units (>= 0) for key under every limit: the Result
// says whether they were admitted and counted. A rejected take counts
// nothing. When Redis or Storage fails, FailurePolicy answers (see
// Result.Source); under FailError with the store's error, wrapped. The
// only other error is that of a negative cost.
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
	switch {
	case l.varyExpiration:
		var err error
		*res, err = l.TakeWith(ctx, key, cost, Limit{})
		return err
	case l.memory != nil:
		// The hot path of every middleware calls the manager itself, which
		// writes into res, rather than the decider, whose take copies the
		// limits in and the Result out (about 450 bytes): a fifth more time
		// for a take in memory (BenchmarkMemoryTake: TakeInto about 105 ns,
		// TakeIntoViaDecider about 126 ns on a 2-core AMD EPYC).
		*res = Result{}
		l.memory.takeInto(ctx, key, &l.base, int64(cost), res)
	default:
		var err error
		if *res, err = l.decider.takeKey(ctx, key, l.base, int64(cost)); err != nil {
			*res = Result{}
			return err
		}
	}
	l.finish(res, &l.base)
	return nil
}

// TakeIdempotent is Take made idempotent: id names the request (its
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
func (l *Limiter) TakeIdempotent(ctx context.Context, key, id string, cost int) (Result, error) {
	if id == "" {
		return l.Take(ctx, key, cost)
	}
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	request := requestIDOf(key, id)
	if l.records != nil {
		var err error
		res := l.records.take(request, int64(cost), func() Result {
			var res Result
			res, err = l.takeInStore(ctx, key, cost) // an error's zero Result is not kept
			return res
		})
		if err != nil {
			return Result{}, err
		}
		return res, nil
	}
	res, err := l.recordStore.takeIdempotent(ctx, key, &request, l.base, int64(cost))
	if err != nil {
		return Result{}, err
	}
	l.finish(&res, &l.base)
	return res, nil
}

// takeInStore is Take decided in the store, past any lease: the records
// of TakeIdempotent keep the store's answers only.
func (l *Limiter) takeInStore(ctx context.Context, key string, cost int) (Result, error) {
	leased, ok := l.decider.(*leasedStore)
	if !ok {
		return l.Take(ctx, key, cost)
	}
	res, err := leased.guard.takeKey(ctx, key, l.base, int64(cost))
	if err != nil {
		return Result{}, err
	}
	l.finish(&res, &l.base)
	return res, nil
}

// leasedBucket reports whether l is a token bucket with leases, which
// takes no refund (errLeasedBucketRefund).
func (l *Limiter) leasedBucket() bool {
	_, ok := l.decider.(*leasedStore)
	return ok && l.alg == TokenBucket
}

// RefundIdempotent is Refund for a take that TakeIdempotent made for request id: it
// also makes the request's record answer no more repeats, so that a retry
// of a request whose cost was given back is decided, and counted, afresh
// (else a refunded request's id would pass its retries for free). A take
// whose record has answered repeats already (retries that came while the
// first request was still being handled) is not given back: the repeats
// were served on it. Nor is one whose record the store could not drop. A
// repeat (SourceRepeat) counted nothing: it is given nothing back, and the
// record stays.
func (l *Limiter) RefundIdempotent(ctx context.Context, key, id string, cost int, taken *Result) (Result, error) {
	if l.leasedBucket() {
		return *taken, errLeasedBucketRefund // and the record stays, as the count does
	}
	if id != "" && taken.Allowed() && taken.source == SourceBackend && cost > 0 {
		request := requestIDOf(key, id)
		var refundable bool
		if l.records != nil {
			refundable = l.records.forget(request)
		} else {
			refundable = l.recordStore.forgetIdempotent(ctx, key, &request, &l.base)
		}
		if !refundable {
			return *taken, nil
		}
	}
	return l.Refund(ctx, key, cost, taken)
}

// Refund credits back cost units of a take that admitted them (taken,
// as Take, TakeInto or TakeWith gave it), in the window it counted them in, and
// returns the state that leaves (as a take of cost 0 would). A refund of
// a take that was rejected, or answered by the deny cache or FailOpen,
// changes nothing. A store that fails the refund loses the credit: the
// error says so. A TokenBucket with Lease takes no refund (an error; see
// Config.Lease).
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
	res, err := l.decider.adjustKey(ctx, key, ls, int64(cost), credit)
	if errors.Is(err, errLeasedBucketRefund) {
		return *taken, err
	}
	if err != nil {
		return *taken, fmt.Errorf("%w: %w", errRefundLost, err)
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
// of cost, FailClosed none, FailError returns the error.
func (l *Limiter) TakeUpTo(ctx context.Context, key string, cost int) (granted int, res Result, err error) {
	if cost < 0 {
		return 0, Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	ls := l.base
	ls.upTo = true
	if res, err = l.decider.takeKey(ctx, key, ls, int64(cost)); err != nil {
		return 0, Result{}, err
	}
	l.finish(&res, &ls)
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
// Penalize's, and so are the configured limits and the errors. A limiter
// with Lease takes no reward (an error): the store counts the units that
// shares hold as spent.
func (l *Limiter) Reward(ctx context.Context, key string, cost int) (Result, error) {
	return l.adjust(ctx, key, cost, reward)
}

// adjust runs a penalty or a reward of cost for key.
func (l *Limiter) adjust(ctx context.Context, key string, cost int, adj adjustment) (Result, error) {
	name := adj.String()
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: %s: cost is %d; it must be >= 0", name, cost)
	}
	res, err := l.decider.adjustKey(ctx, key, l.base, int64(cost), Result{n: l.base.n, adjust: adj})
	if errors.Is(err, errLeasedReward) {
		return Result{}, err
	}
	if err != nil {
		return Result{}, fmt.Errorf("limiter: %s: storage failed; it may not have been made: %w", name, err)
	}
	l.finish(&res, &l.base)
	return res, nil
}

// errRefundLost is Refund's error when the store could not take the credit.
var errRefundLost = errors.New("limiter: refund: storage failed; the credit is lost")

// finish fills in what every Result carries besides the decision: each
// limit's Window.
func (l *Limiter) finish(res *Result, ls *limits) {
	if ls == &l.base && ls.n == 1 { // the common case, without the loop
		res.n, res.each[0].Window = 1, l.windows[0]
		return
	}
	res.n = ls.n
	for i := range ls.n {
		res.each[i].Window = l.windows[i]
	}
	if ls != &l.base {
		res.each[0].Window = policyWindow(l.alg, ls.r[0])
	}
}

// Event describes res, the result of a take of cost on key, as a
// DecisionEvent: the most restrictive limit's Limit, Remaining and
// Expiration, as the X-RateLimit headers give them. DryRun and Latency are
// the caller's to set.
func (l *Limiter) Event(key string, cost int, res *Result) DecisionEvent {
	i := res.tightest()
	d := res.each[i]
	r := l.base.r[i]
	if i == 0 && res.varied {
		r = res.first
	}
	return DecisionEvent{
		Name:       l.name,
		Key:        key,
		Allowed:    d.Allowed,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Expiration: r.span(r.window),
		Cost:       cost,
		RetryAfter: res.RetryAfter(),
		Algorithm:  l.alg.String(),
		Backend:    l.backend,
		Source:     res.Source(),
	}
}

// wallMillis is Unix time in ms, for state shared through a store.
func wallMillis() int64 { return time.Now().UnixMilli() }
