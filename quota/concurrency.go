package quota

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A Concurrency limits how many requests of a key are in flight at once,
// rather than how many start per window: Acquire takes one of the key's
// Max slots for a request, Release gives it back when the request ends.
// In memory (Redis nil) the slots are this process's; on Redis they are
// shared by every replica with the same KeyPrefix and Name, one sorted set
// per key of the requests holding a slot, each with an expiry, so that the
// slots of a replica that died come back after Expiration.

// ConcurrencyConfig configures a Concurrency.
type ConcurrencyConfig struct {
	// Max is how many requests of a key may hold a slot at once (at least 1).
	//
	// Required.
	Max int

	// Expiration is the longest a slot stays taken when its request never
	// releases it (its process died): then the slot is free again. A
	// Release that Redis could not take (a timeout, the breaker open), and
	// an Acquire that timed out but may still run, are made good by this
	// process at the next calls Redis answers. It must exceed the longest request, or a slow request
	// loses its slot while it runs and one more is admitted. At least 1 ms.
	//
	// Optional. Default: 1 minute
	Expiration time.Duration

	// Redis holds the slots, shared by every replica that uses it with the
	// same KeyPrefix and Name; nil keeps them in this process.
	//
	// Optional. Default: nil
	Redis goredis.UniversalClient

	// Name tells apart Concurrency limiters that share Redis: each of a
	// process has its own, or the same to share the slots. It holds no ':',
	// '{' or '}', as Config.Name. A key's slots live in Redis at
	//
	//	KeyPrefix + Name + ":slots{" + key + "}"
	//
	// which no key of a Limiter with the same KeyPrefix can be. Two of one
	// process on one Redis without a Name: NewConcurrency returns an error.
	//
	// Optional. Default: ""
	Name string

	// KeyPrefix begins every key in Redis.
	//
	// Optional. Default: "limiter:"
	KeyPrefix string

	// MaxKeys bounds the keys with slots held in memory, by the in-memory
	// limiter or FailFallback's. A key is forgotten when its last slot is
	// released; at the bound, the keys whose slots have all expired make
	// room, and without any, a request of a new key is rejected (a key
	// takes about 100 bytes besides its length and 16 per slot held).
	//
	// Optional. Default: 1<<20
	MaxKeys int

	// MaxWaiting bounds the callers of AcquireWait that wait at once, in
	// this process; one beyond it gets its rejection at once.
	//
	// Optional. Default: 1024
	MaxWaiting int

	// FailurePolicy says what Acquire does when Redis fails or its
	// breaker is open: FailFallback (the default) takes a slot of an
	// in-memory Concurrency of this process with the same Max (each
	// replica then admits Max of a key), FailOpen admits with no slot,
	// FailClosed rejects, FailError returns the error (with no breaker:
	// every Acquire calls Redis).
	//
	// Optional. Default: FailFallback
	FailurePolicy FailurePolicy

	// StorageTimeout bounds each call to Redis (at least 1 ms).
	//
	// Optional. Default: 100 ms
	StorageTimeout time.Duration

	// BreakerFailures is how many failed calls in a row open the breaker,
	// which then answers by FailurePolicy without calling Redis for
	// BreakerCooldown, as Config's do.
	//
	// Optional. Default: 5 (DefaultBreakerFailures)
	BreakerFailures int

	// BreakerCooldown is how long the open breaker keeps Redis uncalled
	// (at least 1 ms); FailClosed's RetryAfter is it, in whole seconds.
	//
	// Optional. Default: 500 ms (DefaultBreakerCooldown)
	BreakerCooldown time.Duration

	// OnStorageError receives Redis's failures, as Config.OnStorageError
	// does: at most one report a second, counting the failures in between.
	//
	// Optional. Default: logs them with the standard logger.
	OnStorageError func(error)
}

// DefaultConcurrencyExpiration is ConcurrencyConfig.Expiration's default.
const DefaultConcurrencyExpiration = time.Minute

// DefaultMaxWaiting is the default of Config.MaxWaiting and
// ConcurrencyConfig.MaxWaiting: the callers of one Limiter or Concurrency
// that wait at once in a process.
const DefaultMaxWaiting = 1024

// fill applies the defaults to cfg and checks it, naming the field at fault.
func (cfg *ConcurrencyConfig) fill() error {
	if cfg.Max < 1 {
		return fmt.Errorf("limiter: Max is %d; a Concurrency needs at least 1 slot per key", cfg.Max)
	}
	if cfg.Redis != nil {
		if v := reflect.ValueOf(cfg.Redis); v.Kind() == reflect.Pointer && v.IsNil() {
			return fmt.Errorf("limiter: Redis is a nil %T; give a client made with go-redis's New, or nil for memory", cfg.Redis)
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Expiration", &cfg.Expiration, DefaultConcurrencyExpiration}, {"StorageTimeout", &cfg.StorageTimeout, DefaultStorageTimeout},
		{"BreakerCooldown", &cfg.BreakerCooldown, DefaultBreakerCooldown}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < time.Millisecond {
			return fmt.Errorf("limiter: %s is %v; it must be at least 1ms", f.name, *f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxKeys", &cfg.MaxKeys, DefaultMaxKeys}, {"MaxWaiting", &cfg.MaxWaiting, DefaultMaxWaiting}, {"BreakerFailures", &cfg.BreakerFailures, DefaultBreakerFailures}} {
		if *f.v < 0 {
			return fmt.Errorf("limiter: %s is %d; it must not be negative (0 means %d)", f.name, *f.v, f.def)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if cfg.FailurePolicy > FailError {
		return fmt.Errorf("limiter: FailurePolicy is %v; choose FailFallback, FailOpen, FailClosed or FailError", cfg.FailurePolicy)
	}
	if i := strings.IndexAny(cfg.Name, ":{}"); i >= 0 {
		return fmt.Errorf("limiter: Name %q contains %q; it must not contain ':', '{' or '}' (it is a part of every key in Redis)", cfg.Name, cfg.Name[i])
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	return nil
}

// Concurrency limits the requests of a key in flight at once, in memory
// or across replicas on Redis. It starts no goroutine and holds nothing
// to close: a Redis client given to it stays the caller's. Safe for
// concurrent use.
type Concurrency struct {
	max        int
	expiration time.Duration
	backend    string       // DecisionEvent.Backend
	name       string       // DecisionEvent.Name
	local      *memorySlots // in memory: the slots; on Redis: FailFallback's, else nil
	remote     *redisSlots  // nil in memory
	waiters    slotWaiters
	maxWaiting int64
}

// NewConcurrency returns a Concurrency for cfg, or an error that names the
// field of cfg that is invalid.
func NewConcurrency(cfg ConcurrencyConfig) (*Concurrency, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	c := &Concurrency{max: cfg.Max, expiration: cfg.Expiration, backend: "memory", name: cfg.Name, maxWaiting: int64(cfg.MaxWaiting)}
	if cfg.Redis != nil {
		c.backend = "redis"
	}
	c.waiters.keys = make(map[string]*keyWaiters)
	if cfg.Redis == nil || cfg.FailurePolicy == FailFallback {
		c.local = newMemorySlots(cfg.Max, cfg.Expiration, cfg.MaxKeys)
	}
	if cfg.Redis != nil {
		c.remote = newRedisSlots(&cfg)
		// Two Concurrency values of this process on one Redis with no
		// Name would share their slots unasked (two routes' caps as one).
		if err := claimIdentity(c, warnOf(cfg.OnStorageError), cfg.Redis, c.remote.prefix, cfg.Name != ""); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Slot is Acquire's answer: a slot taken (Allowed), which Release gives
// back, or a rejection.
type Slot struct {
	owner      *Concurrency // that took it: Release of another frees nothing
	allowed    bool
	holder     slotHolder
	source     Source
	limit      int
	remaining  int
	retryAfter time.Duration
	key        string // the client's key (a copy), for waking waiters; in memory the map's key
	id         uint64 // in memory
	stored     string // on Redis: the set's key and the member
	member     string
}

// slotHolder says where a Slot's slot is held, and so what Release frees.
type slotHolder uint8

const (
	heldNowhere slotHolder = iota // rejected, released, or FailOpen's
	heldInMemory
	heldInRedis
)

// Allowed reports whether the request got a slot (or FailOpen admitted it
// with none).
func (s Slot) Allowed() bool { return s.allowed }

// Limit is Max, the slots of a key.
func (s Slot) Limit() int { return s.limit }

// Remaining is how many of the key's slots were free after this Acquire,
// never negative; 0 for FailOpen's and FailClosed's answers.
func (s Slot) Remaining() int { return s.remaining }

// Source says what answered: SourceBackend (memory or Redis),
// SourceFallback, SourceFailOpen or SourceFailClosed.
func (s Slot) Source() Source { return s.source }

// RetryAfter is a hint for a rejected request: 1 s (the least that a
// Retry-After header can say: a slot comes back when a request ends,
// which no one can foresee), or FailClosed's breaker cool-down rounded up
// to whole seconds. 0 when allowed.
func (s Slot) RetryAfter() time.Duration { return s.retryAfter }

// slotRetry is the RetryAfter of a rejected Slot.
const slotRetry = time.Second

// Acquire takes one of key's slots for a request, if one is free, and
// returns it; the caller must Release an allowed Slot when the request
// ends, whatever way it ends. A rejection holds nothing. key may be any
// bytes; it is copied. ctx's values reach Redis but its cancellation does
// not: a call that Redis may have run is not abandoned half way (each
// call has StorageTimeout). Only FailError returns an error.
func (c *Concurrency) Acquire(ctx context.Context, key string) (Slot, error) {
	var s Slot
	var err error
	if c.remote != nil {
		s, err = c.remote.acquire(ctx, c, key)
	} else {
		s = c.local.acquire(key, SourceBackend)
	}
	s.owner = c
	return s, err
}

// Release gives back s's slot, exactly that one, and wakes this process's
// AcquireWait callers of its key. A Slot released before, a rejected one
// and FailOpen's hold nothing: their Release does nothing. Release s from
// one goroutine at a time. On Redis, ctx's cancellation is ignored (the
// slot is given back after the request has gone), and a Release that fails
// returns the error (and reports it): the slot is then given back at the
// next call Redis answers from this process, or at its Expiration.
func (c *Concurrency) Release(ctx context.Context, s *Slot) error {
	if s == nil || s.holder == heldNowhere || s.owner != c {
		return nil
	}
	holder := s.holder
	s.holder = heldNowhere
	var err error
	switch holder {
	case heldInMemory:
		c.local.release(s.key, s.id)
	case heldInRedis:
		err = c.remote.release(ctx, s.stored, s.member)
	}
	c.waiters.wake(s.key)
	return err
}

// AcquireWait is Acquire that, when key has no free slot, waits for one up
// to maxDelay: it tries again at once when a request of this process
// releases a slot of key, and every 25 to 50 ms (for other replicas'
// releases and for expired slots). It waits on the caller's goroutine
// alone. At most MaxWaiting callers wait at once; one beyond them, and
// any when maxDelay <= 0, gets Acquire's rejection at once. When ctx ends
// first, it returns ctx's error and holds no slot.
func (c *Concurrency) AcquireWait(ctx context.Context, key string, maxDelay time.Duration) (Slot, error) {
	if err := ctx.Err(); err != nil {
		return Slot{}, fmt.Errorf("limiter: the request ended before it waited for a slot: %w", err)
	}
	deadline := time.Now().Add(maxDelay)
	var w *keyWaiters // registered once this caller waits
	var timer *time.Timer
	for {
		var woken <-chan struct{}
		if w != nil {
			woken = c.waiters.current(w)
		}
		s, err := c.Acquire(ctx, key)
		switch {
		case err != nil:
			return s, err
		case s.allowed && ctx.Err() != nil:
			_ = c.Release(ctx, &s)
			return Slot{}, fmt.Errorf("limiter: the request ended while it waited for a slot: %w", ctx.Err())
		case s.allowed:
			return s, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return s, nil
		}
		if w == nil {
			if c.waiters.waiting.Add(1) > c.maxWaiting {
				c.waiters.waiting.Add(-1)
				return s, nil
			}
			defer c.waiters.waiting.Add(-1)
			// A release between the Acquire above and here wakes no one:
			// the next poll finds its slot.
			w = c.waiters.enter(key)
			defer c.waiters.leave(w)
			woken = c.waiters.current(w)
			timer = time.NewTimer(time.Hour)
			defer timer.Stop()
		}
		timer.Reset(min(left, slotPoll+rand.N(slotPoll)))
		select {
		case <-ctx.Done():
			return Slot{}, fmt.Errorf("limiter: the request ended while it waited for a slot: %w", ctx.Err())
		case <-woken:
		case <-timer.C:
		}
	}
}

// slotPoll is the least time between two tries of a waiting AcquireWait
// that no local release woke; the most is twice it.
const slotPoll = 25 * time.Millisecond

// slotWaiters are the callers of a Concurrency's AcquireWait that wait,
// by key, so that a local Release wakes those of its key at once.
type slotWaiters struct {
	waiting atomic.Int64 // callers waiting, at most maxWaiting
	watched atomic.Int64 // entries in keys: Release skips the lock at 0
	mu      sync.Mutex
	keys    map[string]*keyWaiters
}

// keyWaiters are the waiters of one key: woken is closed (and replaced)
// when a slot of the key is released.
type keyWaiters struct {
	key   string
	woken chan struct{}
	n     int
}

// enter registers a waiter of key.
func (w *slotWaiters) enter(key string) *keyWaiters {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys[key]
	if kw == nil {
		kw = &keyWaiters{key: strings.Clone(key), woken: make(chan struct{})}
		w.keys[kw.key] = kw
		w.watched.Add(1)
	}
	kw.n++
	return kw
}

// current is the channel that the next release of kw's key closes.
func (w *slotWaiters) current(kw *keyWaiters) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return kw.woken
}

// leave unregisters a waiter of kw's key.
func (w *slotWaiters) leave(kw *keyWaiters) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw.n--; kw.n == 0 {
		delete(w.keys, kw.key)
		w.watched.Add(-1)
	}
}

// wake wakes the waiters of key, if any.
func (w *slotWaiters) wake(key string) {
	if w.watched.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.keys[key]; kw != nil {
		close(kw.woken)
		kw.woken = make(chan struct{})
	}
}

// failedSlot is the failure policy's answer to an Acquire whose Redis
// call failed with err, or that the breaker kept off Redis.
func (c *Concurrency) failedSlot(key string, policy FailurePolicy, retryClosed time.Duration, err error) (Slot, error) {
	switch policy {
	case FailError:
		return Slot{}, fmt.Errorf("limiter: storage failed: %w", err)
	case FailOpen:
		return Slot{allowed: true, limit: c.max, source: SourceFailOpen}, nil
	case FailClosed:
		return Slot{limit: c.max, source: SourceFailClosed, retryAfter: retryClosed}, nil
	}
	return c.local.acquire(key, SourceFallback), nil
}

// warnOf is where a Concurrency reports a clash found after New: hook,
// called on a goroutine of the runtime's (a panic in it is logged), or
// the standard logger.
func warnOf(hook func(error)) func(error) {
	if hook == nil {
		return func(err error) { log.Print(err) }
	}
	return func(err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Printf("limiter: OnStorageError panicked: %v; it was told: %v", p, err)
			}
		}()
		hook(&StorageError{Err: err})
	}
}
