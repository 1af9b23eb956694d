package quota

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
)

// guardedStore is a store backend (Redis or a fiber.Storage) behind what a
// remote store needs: a deny cache in front, a timeout on every call
// (timeout.go), a breaker with its probe (probe.go), and the failure policy
// for when there is no answer. It is a Limiter's decider: its take
// returns a Result from the store, the deny cache, the fallback limiter,
// or FailOpen's admission or FailClosed's rejection (see Result.Source),
// or under FailError the store's error;
// its adjustKey never fails a request, and reports errors to the hook only.
// It knows no store's errors: the store classifies them (remoteBackend).
type guardedStore struct {
	store      remoteBackend
	windowed   bool // keys carry their window (see windowedKey)
	ctxTimeout bool // the store returns by its context's deadline; else calls run on a goroutine
	// countsLate says that a call which ran out of time may still count:
	// a busy Redis runs the script it has read, after the caller has gone
	// (see failedTake).
	countsLate bool
	timeout    time.Duration
	breaker    *breaker
	deny       *denyCache // nil when disabled
	fallback   *manager   // FailFallback only
	alg        Algorithm
	policy     FailurePolicy
	// retryClosed is the RetryAfter of FailClosed's rejection: the
	// breaker's cool-down in whole seconds, at least 1.
	retryClosed time.Duration
	reporter    *errorReporter
	clock       func() int64 // ms; nil: monotonic ms since origin
	origin      time.Time
	probeArmed  atomic.Bool // a timer will start a probe (armProbe)
	// life ends when the Limiter that owns the store is gone (see
	// ownedBy): a probe or a look at the settings under way then ends,
	// and no timer starts another.
	life context.Context
	end  context.CancelFunc
	// answeredAt is when (ms since origin, monotonic) the store last
	// answered a call in time, -1 before it has: a call that timed out
	// after it began met a slow store, not an absent one (see failed).
	// refusedAt is when a call last found it refusing service
	// (failureNotRun; see failedTake).
	answeredAt, refusedAt atomic.Int64
	// slowSince is when (ms since origin) the store began to be slow: the
	// first of a run of timeouts amid answers, none further apart than
	// slowGrace; slowAt is the last of them (see failed).
	slowSince, slowAt atomic.Int64
	// nextCheck is when (ms, by now) the store's settings are to be
	// looked at next (see evictionChecker); math.MaxInt64 for never, or
	// while a look is under way.
	nextCheck atomic.Int64
	warn      func(error) // the hook, or the standard logger
}

// remoteBackend is a backend whose calls can fail: Redis or a
// fiber.Storage. probe makes a call that decides nothing, to learn whether
// the store answers again; classify says what a failed call's error tells
// of the store.
type remoteBackend interface {
	backend
	probe(ctx context.Context) error
	classify(err error) failureKind
	// The operators' calls (operators.go): peek and block answer with the
	// Result of a take of 1 that counts nothing, and how long (ms) the key
	// is held off whatever its counts.
	peek(ctx context.Context, key string, ls *limits) (Result, int64, error)
	block(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error)
	reset(ctx context.Context, key string) error
}

// recordKeeper is a backend that keeps TakeIdempotent's records beside
// the keys' state, one call deciding both: Redis.
type recordKeeper interface {
	takeIdempotent(ctx context.Context, key, record string, ls *limits, cost int64) (Result, error)
	forgetIdempotent(ctx context.Context, key, record string) (repeated bool, err error)
}

// failureKind is what a failed call's error tells of the store, as its
// backend reads it (classify).
type failureKind uint8

const (
	// failureUnknown: nothing in the error tells; how long the call took
	// does (quickAnswer).
	failureUnknown failureKind = iota
	// failureAnswer: the store answered, about this one key (a Redis error
	// reply such as WRONGTYPE).
	failureAnswer
	// failureOutOfReach: the store is out of reach (a network error, a
	// closed connection), and may have run the call.
	failureOutOfReach
	// failureNotRun: the store did not run the call, being out of reach (a
	// dial failed) or out of service (Redis refused it: out of memory,
	// wrong credentials, ...).
	failureNotRun
)

// quickAnswer is how fast a failed call must have come back for its error
// to count as the store's answer (which closes the breaker) when nothing
// else tells what the error is: a fiber.Storage's error, say.
const quickAnswer = 2 * time.Millisecond

func newGuardedStore(store remoteBackend, ctxTimeout bool, cfg *Config, alg Algorithm, n int) *guardedStore {
	failures := cfg.BreakerFailures
	if cfg.FailurePolicy == FailError {
		// Every take calls the store (admitCall): the breaker is not to
		// open, and no probe to run.
		failures = math.MaxInt32
	}
	g := &guardedStore{
		store:      store,
		windowed:   cfg.VaryExpiration,
		ctxTimeout: ctxTimeout,
		timeout:    cfg.StorageTimeout,
		breaker:    newBreaker(failures, timestep.Millis(cfg.BreakerCooldown)),
		policy:     cfg.FailurePolicy,
		alg:        alg,
		// saturates for the longest cool-downs
		retryClosed: millis(max(1, timestep.Seconds(cfg.BreakerCooldown)) * 1000),
		reporter:    newErrorReporter(cfg.OnStorageError),
		clock:       cfg.clock,
		origin:      time.Now(),
	}
	g.life, g.end = context.WithCancel(context.Background())
	_, g.countsLate = store.(*redisBackend)
	g.answeredAt.Store(-1)               // never
	g.refusedAt.Store(math.MinInt64 / 2) // never
	g.warn = func(err error) { log.Print(err) }
	if hook := cfg.OnStorageError; hook != nil {
		g.warn = func(err error) {
			// Called on a goroutine of the limiter's own: a panic in the
			// hook must not end the process.
			defer func() {
				if p := recover(); p != nil {
					log.Printf("limiter: OnStorageError panicked: %v; it was told: %v", p, err)
				}
			}()
			hook(&StorageError{Err: err, BreakerOpen: g.breaker.open()})
		}
	}
	if _, ok := store.(evictionChecker); !ok {
		g.nextCheck.Store(math.MaxInt64)
	}
	if !cfg.DisableDenyCache {
		g.deny = newDenyCache(cfg.DenyCacheKeys, n)
	}
	if cfg.FailurePolicy == FailFallback {
		ls := limitsOf(cfg)
		g.fallback = newManager(alg, ls.states(), memoryKeys(alg, &ls, cfg.MaxKeys), cfg.clock)
		if alg == SlidingLog {
			g.fallback.useLogs(&ls)
		}
	}
	return g
}

// ownedBy ends g's life when owner is gone. A probe holds g, never its
// owner, so the owner's collection is what tells that nobody will ask g
// again; g itself could not tell while a probe were out.
func (g *guardedStore) ownedBy(owner *Limiter) {
	runtime.AddCleanup(owner, func(end context.CancelFunc) { end() }, g.end)
}

func (g *guardedStore) now() int64 {
	if g.clock != nil {
		return g.clock()
	}
	return int64(time.Since(g.origin) / time.Millisecond)
}

// takeKey is the decider's take, of cost for key under ls. Its error,
// under FailError only, is the failed call's.
func (g *guardedStore) takeKey(ctx context.Context, key string, ls limits, cost int64) (Result, error) {
	if g.windowed {
		key = windowedKey(nil, &ls, key)
	}
	now := g.now()
	if next := g.nextCheck.Load(); now >= next {
		g.checkSettings(next)
	}
	// A take up to a cost is rejected exactly when a take of 1 is: that is
	// the rejection the deny cache keeps for it, and the one it answers.
	denyCost := cost
	if ls.upTo && cost > 0 {
		denyCost = 1
	}
	var gen uint64
	keep := g.deny != nil
	if keep {
		// A take that may wait for its turn (Reserve) passes a rejection
		// whose wait its delay covers: the store gives it a turn.
		v, ok, g0 := g.deny.check(key, now, &ls, denyCost)
		if ok && v.RetryAfter() > millis(ls.delay) {
			return v, nil
		}
		gen, keep = g0, !ok
	}
	if !g.admitCall(now) {
		return g.unavailable(ctx, key, &ls, cost), nil
	}
	v, err := call(ctx, g, key, "", false, func(ctx context.Context, key string) (Result, error) {
		return g.store.take(ctx, key, &ls, cost)
	})
	if err != nil {
		return g.failedTake(ctx, key, &ls, cost, err)
	}
	if keep && !v.Allowed() {
		g.deny.add(key, now, &ls, denyCost, &v, gen)
	}
	return v, nil
}

// takeIdempotent is TakeIdempotent on a store that keeps the records
// (recordKeeper), for request r of key: the store's idempotent take,
// behind the deny cache for the store's rejections of r (see
// idempotency.go). Its error, under FailError only, is the failed call's.
func (g *guardedStore) takeIdempotent(ctx context.Context, key string, r *requestID, ls limits, cost int64) (Result, error) {
	if g.windowed {
		key = windowedKey(nil, &ls, key)
	}
	if g.deny == nil {
		return g.takeRecorded(ctx, key, r.record(), &ls, cost)
	}
	now := g.now()
	v, ok, gen := g.deny.checkIdempotent(key, r, now, &ls, cost)
	if ok {
		return v, nil
	}
	v, err := g.takeRecorded(ctx, key, r.record(), &ls, cost)
	if err == nil && v.source == SourceBackend && !v.Allowed() {
		g.deny.addIdempotent(key, r, idempotentDenyMost, now, &ls, cost, &v, gen)
	}
	return v, err
}

// takeRecorded is the store's idempotent take under the request's record,
// without the deny cache (a repeat of an admitted request must get its
// admission).
func (g *guardedStore) takeRecorded(ctx context.Context, key, record string, ls *limits, cost int64) (Result, error) {
	keeper, ok := g.store.(recordKeeper)
	if !ok || !g.admitCall(g.now()) {
		return g.unavailable(ctx, key, ls, cost), nil
	}
	v, err := call(ctx, g, key, "", false, func(ctx context.Context, key string) (Result, error) {
		return keeper.takeIdempotent(ctx, key, record, ls, cost)
	})
	if err != nil {
		return g.failedTake(ctx, key, ls, cost, err)
	}
	return v, nil
}

// forgetIdempotent drops the record of request r of key, an idempotent
// take under ls (see Limiter.RefundIdempotent), within the call timeout and
// whatever becomes of the request's context, unless the record has
// answered repeats. It reports whether the take's cost may be given back:
// not when the record answered repeats, nor when the store could not drop
// it (its retries would repeat a take given back).
func (g *guardedStore) forgetIdempotent(ctx context.Context, key string, r *requestID, ls *limits) (refundable bool) {
	keeper, ok := g.store.(recordKeeper)
	if !ok {
		return true // a store without records in it (they are in this process)
	}
	if g.windowed {
		key = windowedKey(nil, ls, key)
	}
	if !g.admitCall(g.now()) {
		return false
	}
	record := r.record()
	repeated, err := within(ctx, g, key, func(ctx context.Context, key string) (bool, error) {
		return keeper.forgetIdempotent(ctx, key, record)
	})
	if err != nil {
		g.reporter.failed(g.now(), fmt.Errorf("limiter: forgetting a request's record: %w", err), g.breaker.open())
		return false
	}
	return !repeated
}

// adjustKey is the decider's adjustment: it applies v.adjust of cost
// units to key (the refund of the take that returned v, or a penalty or a
// reward) and returns the state it leaves; ok is false when it could not
// (the store failed, and the adjustment is lost), which never fails the
// request: errors go to the hook only.
func (g *guardedStore) adjustKey(ctx context.Context, key string, ls limits, cost int64, v Result) (Result, error) {
	if g.windowed {
		key = windowedKey(nil, &ls, key)
	}
	switch v.source {
	case SourceFallback:
		after, _ := g.fallback.adjust(ctx, key, &ls, cost, &v)
		after.source = SourceFallback
		return after, nil
	case SourceDenyCache, SourceFailOpen, SourceFailClosed, SourceRepeat:
		return Result{}, errNothingCounted
	}
	if g.deny != nil {
		// Before the call, and again after it: a rejection that a take
		// gets while the credit is on its way is not kept either.
		g.deny.forget(key)
		defer g.deny.forget(key)
	}
	if !g.admitCall(g.now()) {
		return Result{}, errBreakerOpen // the store is not answering: the credit is lost
	}
	return call(ctx, g, key, v.adjust.String(), false, func(ctx context.Context, key string) (Result, error) {
		return g.store.adjust(ctx, key, &ls, cost, &v)
	})
}

// The errors of an adjustment the store was not asked to make.
var (
	errNothingCounted = errors.New("limiter: the take counted nothing in the store")
	errBreakerOpen    = errors.New("limiter: the breaker is open: the store is not answering")
)

// call runs fn on the store within g.timeout (see within) and tells the
// breaker and the error hook how it went; what names the call in an error
// ("" for a take), and probe says it is the breaker's probe.
func call[T any](ctx context.Context, g *guardedStore, key, what string, probe bool, fn func(ctx context.Context, key string) (T, error)) (T, error) {
	start := time.Since(g.origin)
	v, err := within(ctx, g, key, fn)
	if err != nil {
		if g.life.Err() != nil {
			return v, err // the limiter is gone: nobody to tell
		}
		if endedWithRequest(err) {
			// No failure of the store's, for the breaker. One that the
			// application's deadline ended is reported all the same: a
			// store slower than every request allows would otherwise go
			// unseen; a client's going away is not.
			if errors.Is(err, context.DeadlineExceeded) {
				g.reporter.failed(g.now(), err, g.breaker.open())
			}
			return v, err
		}
		if what != "" {
			err = fmt.Errorf("limiter: %s: %w", what, err)
		}
		g.failed(err, start, probe)
		return v, err
	}
	g.answered(probe)
	return v, nil
}

// slowGrace is how long (ms) timeouts amid answers count as a slow store
// rather than an absent one: past it, as with a Redis Cluster node that
// hangs while the others answer, they count towards opening the breaker,
// so that the node's keys are not rejected for good.
const slowGrace = 5000

// slowFor records a timeout amid answers and reports whether the store has
// been slow for less than slowGrace.
func (g *guardedStore) slowFor() bool {
	now := int64(time.Since(g.origin) / time.Millisecond)
	if g.slowAt.Swap(now) < now-slowGrace {
		g.slowSince.Store(now) // a new run
	}
	return now-g.slowSince.Load() < slowGrace
}

// answered records a call that the store answered: the breaker closes,
// and answeredAt moves on (a write once a ms at most, since every call
// shares it).
func (g *guardedStore) answered(probe bool) {
	g.mark(&g.answeredAt)
	g.breaker.answered(probe)
}

// mark moves at on to now (ms since origin) unless it is there already.
func (g *guardedStore) mark(at *atomic.Int64) {
	if now := int64(time.Since(g.origin) / time.Millisecond); at.Load() < now {
		at.Store(now)
	}
}

// failed records a failed call that began at start (since origin). A
// failure that says the store is out of reach or out of service counts
// towards opening the breaker: a timeout, a network error, an error reply
// that is about the server rather than the key (as the backend's classify
// reads it), or any error that made the call wait. Another error is the store's answer
// about this one key (a Redis error reply such as WRONGTYPE, or an error
// that came back at once, as from a storage that rejects a key's bytes):
// it closes the breaker like any answer, since it cost the request no wait
// and must not switch the limiter off for every client. A timeout while
// the store answered other calls in time is neither: the store is slow,
// not out of reach, and the breaker's fallback would cost the limit (see
// failedTake); it is reported only.
func (g *guardedStore) failed(err error, start time.Duration, probe bool) {
	now := g.now()
	kind := g.store.classify(err)
	if kind == failureNotRun {
		g.mark(&g.refusedAt)
	}
	switch {
	case !unreachable(err, kind, time.Since(g.origin)-start):
		g.answered(probe)
	case !probe && errors.Is(err, ErrStorageTimeout) && g.answeredAt.Load() > int64(start/time.Millisecond) && g.slowFor():
		// slow: answered others while it waited, and not for long
	case g.breaker.failed(now, probe):
		g.armProbe()
	}
	g.reporter.failed(now, err, g.breaker.open())
}

// unreachable tells whether err, which the backend classified as kind,
// from a call that took took, says that the store is out of reach or out
// of service rather than answering.
func unreachable(err error, kind failureKind, took time.Duration) bool {
	switch {
	case errors.Is(err, ErrStorageTimeout):
		return true // whatever else the call met on the way
	case kind == failureUnknown:
		return took >= quickAnswer
	}
	return kind != failureAnswer
}
