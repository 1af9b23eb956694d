package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/timestep"
	goredis "github.com/redis/go-redis/v9"
)

// redisSlots holds a Concurrency's slots in Redis (redisengine.SlotEngine:
// one script call per Acquire, one ZREM per Release), each call bounded by
// StorageTimeout, behind quota's breaker and error reporting. A slot's
// member in a key's set is this Concurrency's random id and a counter, so
// no two requests, of any replica, share one, and a release frees its own
// slot alone.
type redisSlots struct {
	engine      redisengine.SlotEngine
	max         int64
	exp         time.Duration
	prefix      string // KeyPrefix + Name + ":slots{"
	ids         string // 16 random hex digits and ':'
	next        atomic.Uint64
	timeout     time.Duration
	policy      FailurePolicy
	breaker     *breaker // nil under FailError, whose every call goes to Redis
	reporter    *errorReporter
	retryClosed time.Duration
	origin      time.Time
	// owed are the slots this process gave back, or may have taken, that
	// no answered ZREM has removed: releases the breaker skipped or Redis
	// failed, and acquires that timed out (Redis may run them late).
	// Each answered call removes a few of them (settle), so that a slow or
	// failing Redis does not hold keys off for a whole Expiration.
	owedMu sync.Mutex
	owed   []owedSlot
}

// owedSlot is a slot to remove from Redis: its set and its member.
type owedSlot struct{ stored, member string }

// maxOwed bounds owed: past it, the oldest come back after Expiration
// only. One answered call removes one owed slot (settle), so that a call
// costs at most two round trips, each within StorageTimeout.
const maxOwed = 4096

func newRedisSlots(cfg *ConcurrencyConfig) *redisSlots {
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	r := &redisSlots{
		// The engine's pipelines start no goroutine that outlives a call,
		// and the slot calls do not go through them.
		engine:      redisengine.Open(cfg.Redis, nil).(redisengine.SlotEngine),
		max:         int64(cfg.Max),
		exp:         cfg.Expiration,
		prefix:      cfg.KeyPrefix + cfg.Name + ":slots{",
		ids:         hex.EncodeToString(id[:]) + ":",
		timeout:     cfg.StorageTimeout,
		policy:      cfg.FailurePolicy,
		reporter:    newErrorReporter(cfg.OnStorageError),
		retryClosed: millis(max(1, timestep.Seconds(cfg.BreakerCooldown)) * 1000),
		origin:      time.Now(),
	}
	if r.policy != FailError {
		r.breaker = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown.Milliseconds())
	}
	return r
}

func (r *redisSlots) now() int64 { return int64(time.Since(r.origin) / time.Millisecond) }

// acquire is Concurrency.Acquire on Redis.
func (r *redisSlots) acquire(ctx context.Context, c *Concurrency, key string) (Slot, error) {
	probe := false
	if r.breaker != nil {
		var ok bool
		if ok, probe = r.breaker.allow(r.now()); !ok {
			return c.failedSlot(key, r.policy, r.retryClosed, errBreakerOpen)
		}
	}
	stored := r.prefix + key + "}"
	member := r.ids + strconv.FormatUint(r.next.Add(1), 36)
	var acquired bool
	var taken int64
	err := r.call(ctx, probe, func(ctx context.Context) (err error) {
		acquired, taken, err = r.engine.AcquireSlot(ctx, stored, member, r.max, r.exp)
		return err
	})
	if err != nil {
		// A call that timed out, or whose connection failed, may still
		// take the slot in Redis: it is owed back, at the next answered
		// call (or at Expiration). One Redis answered with an error took
		// nothing.
		if !answeredWithError(err) {
			r.owe(stored, member)
		}
		return c.failedSlot(key, r.policy, r.retryClosed, err)
	}
	r.settle(ctx)
	s := Slot{allowed: acquired, source: SourceBackend, limit: int(r.max), remaining: int(max(0, r.max-taken))}
	if !acquired {
		s.retryAfter = slotRetry
		return s, nil
	}
	s.holder, s.stored, s.member = heldInRedis, stored, member
	s.key = stored[len(r.prefix) : len(stored)-1] // the client's key, copied with stored
	return s, nil
}

// release is Concurrency.Release on Redis.
func (r *redisSlots) release(ctx context.Context, stored, member string) error {
	probe := false
	if r.breaker != nil {
		var ok bool
		if ok, probe = r.breaker.allow(r.now()); !ok {
			r.owe(stored, member)
			return fmt.Errorf("limiter: release slot: %w; it is given back at the next call Redis answers, or at its Expiration", errBreakerOpen)
		}
	}
	err := r.call(ctx, probe, func(ctx context.Context) error {
		return r.engine.ReleaseSlot(ctx, stored, member)
	})
	if err != nil {
		if !answeredWithError(err) {
			r.owe(stored, member)
		}
		return fmt.Errorf("limiter: release slot (given back at the next call Redis answers, or at its Expiration): %w", err)
	}
	r.settle(ctx)
	return nil
}

// owe records a slot to remove from Redis when it answers again.
func (r *redisSlots) owe(stored, member string) {
	r.owedMu.Lock()
	if len(r.owed) >= maxOwed {
		r.owed = r.owed[1:]
	}
	r.owed = append(r.owed, owedSlot{stored, member})
	r.owedMu.Unlock()
}

// settle removes one owed slot from Redis, after a call that Redis
// answered. One it cannot remove for a timeout or a lost connection stays
// owed; one Redis refuses (a key of another type) is dropped: it comes
// back at its Expiration. A removal that reaches Redis before a late
// acquire of the same member (over another connection) leaves that slot
// until its Expiration.
func (r *redisSlots) settle(ctx context.Context) {
	r.owedMu.Lock()
	if len(r.owed) == 0 {
		r.owedMu.Unlock()
		return
	}
	o := r.owed[0]
	r.owed = r.owed[1:]
	r.owedMu.Unlock()
	err := r.call(ctx, false, func(ctx context.Context) error { return r.engine.ReleaseSlot(ctx, o.stored, o.member) })
	if err != nil && !answeredWithError(err) {
		r.owe(o.stored, o.member)
	}
}

// answeredWithError reports whether err is Redis's error reply: the call
// reached Redis, which refused it and so changed nothing.
func answeredWithError(err error) bool {
	var reply goredis.Error
	return errors.As(err, &reply)
}

// call runs a Redis call with StorageTimeout, ctx's values but not its
// cancellation (a release must happen after the request has gone, and an
// acquire that Redis ran must be answered), and records its outcome in
// the breaker and the reporter as quota's guard does (guard.go's failed).
func (r *redisSlots) call(ctx context.Context, probe bool, call func(ctx context.Context) error) error {
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	err := call(cctx)
	late := cctx.Err() != nil
	cancel()
	if err == nil {
		if r.breaker != nil {
			r.breaker.answered(probe)
		}
		return nil
	}
	if late || errors.Is(err, context.DeadlineExceeded) {
		err = &timedOut{err: err, timeout: r.timeout}
	}
	if r.breaker != nil {
		if unreachable(err, redisFailure(err), time.Since(start)) {
			r.breaker.failed(r.now(), probe)
		} else {
			r.breaker.answered(probe)
		}
	}
	r.reporter.failed(r.now(), err, r.breaker != nil && r.breaker.open())
	return err
}
