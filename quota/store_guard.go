package quota

import (
	"context"
	"errors"
	"fmt"
	"github.com/fiberlimit/limiter/internal/timestep"
	"io"
	"log"
	"math"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"weak"

	goredis "github.com/redis/go-redis/v9"
)

// guardedStore is a store backend (Redis or a fiber.Storage) behind what a
// remote store needs: a deny cache in front, a timeout on every call, a
// breaker, and the failure policy for when there is no answer. Its take
// returns a Result from the store, the deny cache, the fallback limiter,
// or FailOpen's admission or FailClosed's rejection (see Result.Source);
// its refund never fails a request, and reports errors to the hook only.
type guardedStore struct {
	store      remoteBackend
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
	// refusedAt is when a call last found it refusing service (see notRun
	// and failedTake).
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

// evictionChecker is a backend that can tell whether its store is set to
// drop keys (see checkEviction).
type evictionChecker interface {
	checkEviction(ctx context.Context) (next int64, warning error)
}

// remoteBackend is a backend whose calls can fail: Redis or a
// fiber.Storage. probe makes a call that decides nothing, to learn whether
// the store answers again.
type remoteBackend interface {
	backend
	probe(ctx context.Context) error
}

// quickAnswer is how fast a failed call must have come back for its error
// to count as the store's answer (which closes the breaker) when nothing
// else tells what the error is: a fiber.Storage's error, say.
const quickAnswer = 2 * time.Millisecond

func newGuardedStore(store remoteBackend, ctxTimeout bool, cfg *Config, alg Algorithm, n int) *guardedStore {
	g := &guardedStore{
		store:      store,
		ctxTimeout: ctxTimeout,
		timeout:    cfg.StorageTimeout,
		breaker:    newBreaker(cfg.BreakerFailures, timestep.Millis(cfg.BreakerCooldown)),
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

func (g *guardedStore) take(ctx context.Context, key string, ls *limits, cost int64) Result {
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
	if g.deny != nil {
		v, ok, g0 := g.deny.check(key, now, ls, denyCost)
		if ok {
			return v
		}
		gen = g0
	}
	if !g.admitCall(now) {
		return g.unavailable(ctx, key, ls, cost)
	}
	v, err := call(ctx, g, key, "", false, func(ctx context.Context, key string) (Result, error) {
		return g.store.take(ctx, key, ls, cost)
	})
	if err != nil {
		return g.failedTake(ctx, key, ls, cost, err)
	}
	if g.deny != nil && !v.Allowed() {
		g.deny.add(key, now, ls, denyCost, &v, gen)
	}
	return v
}

// takeOnce is take once per request: the store's TakeOnce, without the
// deny cache (a repeat of an admitted request must get its admission).
func (g *guardedStore) takeOnce(ctx context.Context, key, record string, ls *limits, cost int64) Result {
	once, ok := g.store.(interface {
		takeOnce(ctx context.Context, key, record string, ls *limits, cost int64) (Result, error)
	})
	if !ok || !g.admitCall(g.now()) {
		return g.unavailable(ctx, key, ls, cost)
	}
	v, err := call(ctx, g, key, "", false, func(ctx context.Context, key string) (Result, error) {
		return once.takeOnce(ctx, key, record, ls, cost)
	})
	if err != nil {
		return g.failedTake(ctx, key, ls, cost, err)
	}
	return v
}

// forgetOnce drops the record of a take once per request (see
// Limiter.RefundOnce), within the call timeout and whatever becomes of the
// request's context, unless the record has answered repeats. It reports
// whether the take's cost may be given back: not when the record answered
// repeats, nor when the store could not drop it (its retries would repeat
// a take given back).
func (g *guardedStore) forgetOnce(ctx context.Context, key, record string) (refundable bool) {
	once, ok := g.store.(interface {
		forgetOnce(ctx context.Context, key, record string) (repeated bool, err error)
	})
	if !ok {
		return true // a store without records in it (they are in this process)
	}
	if !g.admitCall(g.now()) {
		return false
	}
	repeated, err := within(ctx, g, key, func(ctx context.Context, key string) (bool, error) {
		return once.forgetOnce(ctx, key, record)
	})
	if err != nil {
		g.reporter.failed(g.now(), fmt.Errorf("limiter: forgetting a request's record: %w", err), g.breaker.open())
		return false
	}
	return !repeated
}

// refund credits the request's cost back and returns the state it leaves;
// ok is false when it could not (the store failed, and the credit is
// lost), which never fails the request: errors go to the hook only.
func (g *guardedStore) refund(ctx context.Context, key string, ls *limits, cost int64, v *Result) (after Result, ok bool) {
	switch v.source {
	case SourceFallback:
		after, _ = g.fallback.refund(ctx, key, ls, cost, v)
		after.source = SourceFallback
		return after, true
	case SourceDenyCache, SourceFailOpen, SourceFailClosed, SourceRepeat:
		return Result{}, false // nothing was counted
	}
	if g.deny != nil {
		// Before the call, and again after it: a rejection that a take
		// gets while the credit is on its way is not kept either.
		g.deny.forget(key)
		defer g.deny.forget(key)
	}
	if !g.admitCall(g.now()) {
		return Result{}, false // the store is not answering: the credit is lost
	}
	after, err := call(ctx, g, key, "refund", false, func(ctx context.Context, key string) (Result, error) {
		return g.store.refund(ctx, key, ls, cost, v)
	})
	return after, err == nil
}

// checkSettings looks at the store's settings on a goroutine of its own,
// unless another call has just started to (next is the time it was due):
// the first decision does, and then one every evictionCheckEvery. A store
// that may drop the limiter's keys is reported to the hook.
func (g *guardedStore) checkSettings(next int64) {
	if !g.nextCheck.CompareAndSwap(next, math.MaxInt64) {
		return
	}
	go func() {
		after := int64(evictionRetry)
		defer func() {
			// A panic (in a go-redis hook, say) is the look's failure, not
			// the process's.
			if p := recover(); p != nil {
				log.Printf("limiter: checking whether Redis may evict rate-limit keys panicked: %v", p)
			}
			if after >= 0 {
				g.nextCheck.Store(g.now() + after)
			}
		}()
		ctx, cancel := context.WithTimeout(g.life, max(g.timeout, time.Second))
		defer cancel()
		var warning error
		after, warning = g.store.(evictionChecker).checkEviction(ctx)
		if warning != nil && g.life.Err() == nil {
			g.warn(warning)
		}
	}()
}

// admitCall reports whether a call may go to the store at now. When the
// breaker is open and its cool-down has passed, it starts a probe on a
// goroutine of its own and refuses the call: no request waits on a store
// that may still be down.
func (g *guardedStore) admitCall(now int64) bool {
	ok, probe := g.breaker.allow(now)
	if probe {
		go g.probe()
		return false
	}
	return ok
}

// probe asks the store whether it serves decisions again (for Redis, a
// script call that writes: a server that answers PING but refuses or holds
// writes is still out of service), and closes the breaker or keeps it open
// for another cool-down. Its caller holds the breaker's probe. The probe
// ends when g's life does.
func (g *guardedStore) probe() {
	_, _ = call(context.Background(), g, "", "probe", true, func(ctx context.Context, _ string) (struct{}, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(g.life, cancel)()
		return struct{}{}, g.store.probe(ctx)
	})
}

// armProbe makes sure a probe runs one cool-down from now even if no
// request comes to start it, so that an idle replica finds the store back
// by itself: a timer, no goroutine while it waits, and one at most per
// store. The timer holds the store weakly, and starts nothing once the
// store's life has ended: a limiter dropped while its breaker is open is
// not kept probing.
func (g *guardedStore) armProbe() {
	if !g.probeArmed.CompareAndSwap(false, true) {
		return
	}
	store := weak.Make(g)
	time.AfterFunc(time.Duration(g.breaker.cooldown)*time.Millisecond, func() {
		g := store.Value()
		if g == nil || g.life.Err() != nil {
			return
		}
		g.probeArmed.Store(false)
		if ok, probe := g.breaker.allow(g.now()); probe {
			g.probe()
		} else if !ok {
			g.armProbe() // not yet due by the limiter's clock, or a probe is out
		}
	})
}

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
// that is about the server rather than the key (see refusesService), or
// any error that made the call wait. Another error is the store's answer
// about this one key (a Redis error reply such as WRONGTYPE, or an error
// that came back at once, as from a storage that rejects a key's bytes):
// it closes the breaker like any answer, since it cost the request no wait
// and must not switch the limiter off for every client. A timeout while
// the store answered other calls in time is neither: the store is slow,
// not out of reach, and the breaker's fallback would cost the limit (see
// failedTake); it is reported only.
func (g *guardedStore) failed(err error, start time.Duration, probe bool) {
	now := g.now()
	if notRun(err) {
		g.mark(&g.refusedAt)
	}
	switch {
	case !unreachable(err, time.Since(g.origin)-start):
		g.answered(probe)
	case !probe && errors.Is(err, ErrStorageTimeout) && g.answeredAt.Load() > int64(start/time.Millisecond) && g.slowFor():
		// slow: answered others while it waited, and not for long
	case g.breaker.failed(now, probe):
		g.armProbe()
	}
	g.reporter.failed(now, err, g.breaker.open())
}

// unreachable tells whether err, from a call that took took, says that the
// store is out of reach or out of service rather than answering.
func unreachable(err error, took time.Duration) bool {
	var reply goredis.Error // an error reply from the server
	if errors.Is(err, ErrStorageTimeout) {
		return true // whatever else the call met on the way
	}
	if errors.As(err, &reply) { // go-redis: an error reply from the server
		return refusesService(reply.Error())
	}
	var netErr net.Error
	if errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, goredis.ErrClosed) || errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrPoolExhausted) {
		return true
	}
	return took >= quickAnswer
}

// outOfService are the beginnings of the Redis error replies that say the
// server, not the key, cannot serve the call: it is out of memory
// (maxmemory under noeviction) or cannot persist (MISCONF), the
// connection's credentials or database are refused (replies to AUTH, HELLO
// or SELECT while go-redis sets up a connection, which it then closes, so
// that every call would dial again), its ACL user may not run a command
// the script calls (GET, SET, TIME, ...), it is loading, busy with a script,
// read-only or cut off from its master or cluster, full of clients, or has
// no script commands.
var outOfService = [...]string{
	"OOM", "MISCONF",
	"NOAUTH", "WRONGPASS", "NOPERM", "ERR AUTH", "ERR Client sent AUTH", "ERR invalid password",
	// An ACL user's command refused inside a script: Redis 7.0's wording,
	// and 7.2's and Valkey's (Redis 6's is found within its wrapper, see
	// refusesService).
	"ERR " + scriptACLRefusal, "ERR ACL failure in script",
	"ERR DB index", "ERR invalid DB index",
	"LOADING", "BUSY ", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "NOREPLICAS",
	"ERR max number of clients", "ERR unknown command",
}

// scriptACLRefusal begins what Redis 6 and 7.0 say of a command, or a key,
// that the ACL user may not run or reach, in a script.
const scriptACLRefusal = "The user executing the script can't"

// refusesService tells whether a Redis error reply says that the server
// cannot serve calls now (see outOfService). Redis 6 and earlier give an
// error that a script's redis.call met as "ERR Error running script (...):
// ...: -OOM command not allowed ...": the reply's own code follows the
// last ": -".
func refusesService(reply string) bool {
	if strings.HasPrefix(reply, "ERR Error running script") {
		if strings.Contains(reply, scriptACLRefusal) {
			return true // Redis 6: an ACL user's command refused in the script
		}
		if i := strings.LastIndex(reply, ": -"); i >= 0 {
			reply = reply[i+3:]
		}
	}
	for _, prefix := range outOfService {
		if strings.HasPrefix(reply, prefix) {
			return true
		}
	}
	return false
}

// slowRetry is the RetryAfter of a take that failedTake rejects: the
// least that Retry-After, in whole seconds, can say.
const slowRetry = time.Second

// failedTake answers a take whose call failed with err. Under FailFallback
// a Redis call that ran out of time is not handed to the fallback unless
// Redis is out of service: its script may still run (a busy Redis runs
// what it has read, after the caller has gone), and Redis may hold the key
// spent, neither of which the fallback knows, so that its admission could
// be one beyond the limit. A slow Redis is not an absent one: the take is
// rejected for slowRetry, with Remaining 0 and Source SourceFallback. The
// fallback decides once the breaker has opened, when this call, or another
// within a cool-down, found Redis refusing service (see notRun), and
// before Redis has answered this limiter at all: until then a timeout
// cannot tell a slow Redis from one that is not there (go-redis retries a
// refused dial past StorageTimeout before it says so). Other failures, and
// the other policies, get unavailable's answer.
func (g *guardedStore) failedTake(ctx context.Context, key string, ls *limits, cost int64, err error) Result {
	if g.policy != FailFallback || !g.countsLate || !errors.Is(err, ErrStorageTimeout) || notRun(err) ||
		g.answeredAt.Load() < 0 || g.refusedAt.Load() >= int64(time.Since(g.origin)/time.Millisecond)-g.breaker.cooldown {
		return g.unavailable(ctx, key, ls, cost)
	}
	v := Result{n: ls.n, source: SourceFallback}
	for i := range ls.n {
		c := capacity(g.alg, ls.r[i])
		v.each[i] = Decision{Limit: int(c), RetryAfter: slowRetry}
		if cost > c {
			v.each[i].RetryAfter = Never
		}
	}
	return v
}

// notRun tells whether err (of a call that may have run out of time as
// go-redis retried) says that Redis did not run the call because it is out
// of reach or out of service: a dial failed (refused, or out of time
// itself), or Redis refused service (refusesService: a wrong password at
// the connection's AUTH, OOM, ...).
func notRun(err error) bool {
	var op *net.OpError
	var reply goredis.Error
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &reply) && refusesService(reply.Error())
}

// unavailable is the failure policy's answer: FailOpen's admission and
// FailClosed's rejection carry each limit's Limit (Remaining 0), and
// FailClosed's a RetryAfter of the breaker's cool-down.
func (g *guardedStore) unavailable(ctx context.Context, key string, ls *limits, cost int64) Result {
	if g.policy == FailFallback {
		v, _ := g.fallback.take(ctx, key, ls, cost)
		v.source = SourceFallback
		return v
	}
	v := Result{n: ls.n, source: SourceFailOpen}
	if g.policy == FailClosed {
		v.source = SourceFailClosed
	}
	for i := range ls.n {
		v.each[i] = Decision{Allowed: g.policy == FailOpen, Limit: int(capacity(g.alg, ls.r[i]))}
		if g.policy == FailClosed {
			v.each[i].RetryAfter = g.retryClosed
		}
	}
	return v
}

// within runs call on the store with g.timeout, under ctx's values but not
// its cancellation: a client that goes away, or a deadline the application
// derives from the request, must not turn a decision into the failure
// policy's (FailOpen would admit it). When the store returns by its
// context's deadline, call runs here. Otherwise it runs on a goroutine of
// its own with a copy of key (the request's buffers are reused once it
// ends), and within returns at the deadline while call goes on: its result
// is then dropped. A panic in call is returned as an error, on either path.
func within[T any](ctx context.Context, g *guardedStore, key string, call func(ctx context.Context, key string) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	if g.ctxTimeout {
		v, err := guarded(ctx, key, call)
		// A read that the connection's deadline (ctx's) ended can return
		// a moment before ctx's own timer marks it done.
		if dl, _ := ctx.Deadline(); err != nil && (ctx.Err() != nil || !time.Now().Before(dl) || errors.Is(err, context.DeadlineExceeded)) {
			err = &timedOut{err: err, timeout: g.timeout}
		}
		return v, err
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	key = strings.Clone(key)
	go func() {
		v, err := guarded(ctx, key, call)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w (%v)", ErrStorageTimeout, g.timeout)
	}
}

// timedOut is the error of a call that StorageTimeout ended. It wraps
// ErrStorageTimeout and the call's own error, and leads with the latter
// when that names what failed (a refused dial, a reset connection, an
// error reply that go-redis kept retrying) rather than the deadline alone.
type timedOut struct {
	err     error
	timeout time.Duration
}

func (e *timedOut) Error() string {
	if hasCause(e.err) {
		return fmt.Sprintf("%v (StorageTimeout %v)", e.err, e.timeout)
	}
	return fmt.Sprintf("%v (%v): %v", ErrStorageTimeout, e.timeout, e.err)
}

func (e *timedOut) Unwrap() []error { return []error{ErrStorageTimeout, e.err} }

// guarded runs call, turning a panic into an error.
func guarded[T any](ctx context.Context, key string, call func(ctx context.Context, key string) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limiter: storage call panicked: %v", p)
		}
	}()
	return call(ctx, key)
}
