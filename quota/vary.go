package quota

// A Limiter's first limit may vary per call (TakeWith): its Max with
// Config.VaryMax, its Expiration with Config.VaryExpiration. The time step
// of a varied Max is fitted for the largest Max there can be; a state kept
// under one window means nothing under another, so with VaryExpiration
// every key is stored with its window (windowedKey).

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/fiberlimit/limiter/internal/timestep"
)

// TakeWith is Take with the first limit replaced, for this call, by
// first: its Max when not 0 (needs Config.VaryMax; above 2^32-1 counts as
// 2^32-1), its Expiration when not 0 (needs Config.VaryExpiration), and
// its Burst when not 0 (TokenBucket; needs Config.VaryMax), else the
// configured Burst, or Max when none is. A plan's quota, say, or Fiber
// v3's MaxFunc and ExpirationFunc. A Max below 0 is a plan that admits
// nothing, as in Fiber: the take is rejected, with RetryAfter Never,
// without reading or counting anything.
func (l *Limiter) TakeWith(ctx context.Context, key string, cost int, first Limit) (Result, error) {
	if cost < 0 {
		return Result{}, fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	}
	if first.Max < 0 {
		return l.shut(), nil
	}
	ls, err := l.varied(first)
	if err != nil {
		return Result{}, err
	}
	res, err := l.decider.takeKey(ctx, key, ls, int64(cost))
	if err != nil {
		return Result{}, err
	}
	l.finish(&res, &ls)
	res.varied, res.first = true, ls.r[0]
	return res, nil
}

// shut is the Result of a take under a plan that admits nothing: every
// limit rejects it, for good, with nothing left.
func (l *Limiter) shut() Result {
	res := Result{n: l.base.n}
	for i := range res.n {
		res.each[i].RetryAfter = Never
	}
	l.finish(&res, &l.base)
	return res
}

// varied is the limits with the first one changed as first says.
func (l *Limiter) varied(first Limit) (limits, error) {
	ls := l.base
	r := &ls.r[0]
	switch {
	case first.Burst < 0 || first.Expiration < 0:
		return ls, fmt.Errorf("limiter: TakeWith's limit %+v has a negative field", first)
	case first.Max != 0 && !l.varyMax && int64(first.Max) != r.max:
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
	limit, burst := r.max, r.burst
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
	r.max, r.burst = limit, burst
	return ls, nil
}

// keyRoom is the room on the stack for a key with its window (see
// windowedKey); longer keys allocate.
const keyRoom = 128

// windowedKey is the key a backend keeps key's state under with
// VaryExpiration, a state being kept apart for each window, as a state
// means something only under its own: "<window>:<key>" (the window of ls's
// first limit, as in the Redis key prefix, which holds no ':'), built in
// dst when it fits. The deciders call it (decider): the manager with dst
// on its stack. The result is valid while dst is: backends copy what they
// keep.
func windowedKey(dst []byte, ls *limits, key string) string {
	r := &ls.r[0]
	dst = timestep.AppendWindow(dst, r.window*r.stepMillis())
	dst = append(append(dst, ':'), key...)
	return unsafe.String(unsafe.SliceData(dst), len(dst))
}
