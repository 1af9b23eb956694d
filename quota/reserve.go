package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Reservation is a take that may wait for its turn (Reserve): its
// Result, whose Delay is the wait, and what Wait and Cancel need to wait
// for the turn or give it back. Call Wait or Cancel on every admitted
// Reservation with a Delay above 0: until then it holds one of the
// Limiter's MaxWaiting places. A Reservation is for one goroutine: its
// Wait and Cancel are not safe for concurrent use.
type Reservation struct {
	Result

	l    *Limiter
	key  string
	cost int
	turn time.Time // the turn on this process's clock; never before the store's
	// held is set while the Reservation holds a waiting place.
	held bool
}

// Reserve takes cost units (>= 0) for key at its turn: now if every
// limit admits them, else at the earliest time within maxDelay when every
// limit will. The cost is counted at once, as a take at the turn counts
// it (on Redis in the same script call, so replicas together never admit
// more than the limit), and the Reservation's Delay says how long to wait
// for the turn: Wait waits it out, Cancel gives the turn back. A take
// whose turn lies beyond maxDelay is rejected at once and counts nothing;
// its RetryAfter is when it would be admitted without waiting. When
// MaxWaiting takes already wait, it is decided as with maxDelay 0:
// admitted only when its turn is now (never before turns that wait).
//
// Take on the same keys does not wait for turns: it admits at once a cost
// it counts at the latest turn. Use Reserve (or Wait) for every take of a
// limiter that gives turns; the middlewares with MaxDelay do.
//
// maxDelay is at most MaxDelay's bound: a minute, or the shortest limit's
// Expiration when that is longer (a state further ahead reads as no state
// on every backend). Not with Lease, BlockFor, MinInterval or
// VaryExpiration (an error). FailurePolicy answers as it does for Take;
// FailFallback's in-memory limiter keeps turns too.
func (l *Limiter) Reserve(ctx context.Context, key string, cost int, maxDelay time.Duration) (*Reservation, error) {
	if err := l.checkTurns(cost, maxDelay); err != nil {
		return nil, err
	}
	ls := l.base
	ls.turn = true // admitted when its turn is now, at least
	waiting := false
	if maxDelay > 0 {
		if l.waiting.Add(1) <= l.maxWaiting {
			waiting, ls.delay = true, maxDelay.Milliseconds()
		} else {
			l.waiting.Add(-1)
		}
	}
	r := &Reservation{l: l, cost: cost}
	var err error
	if l.memory != nil {
		l.memory.takeInto(ctx, key, &ls, int64(cost), &r.Result)
	} else {
		r.Result, err = l.decider.takeKey(ctx, key, ls, int64(cost))
	}
	// The turn counts from the answer, which comes after the store
	// decided, and one millisecond more: the store's clock counts whole
	// milliseconds, so its now may lie up to 1 ms behind this one. A
	// waiter never wakes before its turn.
	r.turn = time.Now().Add(r.Delay())
	if r.wait > 0 {
		r.turn = r.turn.Add(time.Millisecond)
	}
	if err != nil {
		r.Result = Result{}
	} else {
		l.finish(&r.Result, &ls)
	}
	switch {
	case waiting && err == nil && r.Allowed() && r.wait > 0:
		r.key = strings.Clone(key) // kept for Cancel: a caller's key may live in a buffer it reuses
		r.held = true
	case waiting:
		l.waiting.Add(-1)
	}
	return r, err
}

// Wait takes cost units (>= 0) for key at its turn within maxDelay and
// waits for it (Reserve, then Reservation.Wait): the Result says whether
// they were admitted. An error is Reserve's, or ctx's when it ends before
// the turn, which is then given back.
func (l *Limiter) Wait(ctx context.Context, key string, cost int, maxDelay time.Duration) (Result, error) {
	r, err := l.Reserve(ctx, key, cost, maxDelay)
	if err != nil {
		return Result{}, err
	}
	if err := r.Wait(ctx); err != nil {
		return r.Result, err
	}
	return r.Result, nil
}

// CheckReserve returns the error Reserve would return for maxDelay on
// l, whatever the key and the cost, or nil: the middlewares check their
// MaxDelay with it at New.
func (l *Limiter) CheckReserve(maxDelay time.Duration) error {
	return l.checkTurns(0, maxDelay)
}

// checkTurns checks a Reserve of cost within maxDelay against l.
func (l *Limiter) checkTurns(cost int, maxDelay time.Duration) error {
	switch {
	case cost < 0:
		return fmt.Errorf("limiter: cost is %d; it must be >= 0", cost)
	case maxDelay < 0 || maxDelay > l.longestDelay:
		return fmt.Errorf("limiter: Reserve: maxDelay is %v; it must be 0 to %v (a minute, or the shortest limit's Expiration if longer: a state further ahead is read as none)", maxDelay, l.longestDelay)
	case l.base.keyRules():
		return errors.New("limiter: Reserve: the limiter has BlockFor or MinInterval, which hold a key off rather than give it a turn")
	case l.varyExpiration:
		return errors.New("limiter: Reserve: the limiter has VaryExpiration; a turn is kept in one window's steps")
	}
	if _, leased := l.decider.(*leasedStore); leased {
		return errors.New("limiter: Reserve: the limiter has Lease; a share is decided now, not at a turn")
	}
	return nil
}

// longestDelayOf is the longest maxDelay of Reserve for ls: the least
// span that rule.tooFarAhead allows of any limit.
func longestDelayOf(ls *limits) time.Duration {
	longest := time.Duration(1<<63 - 1)
	for _, r := range ls.r[:ls.n] {
		longest = min(longest, max(r.span(r.window), aheadMS*time.Millisecond))
	}
	return longest
}

// Wait waits for r's turn. It returns at once for a rejected take or one
// admitted now. When ctx ends first, the turn is given back (Cancel),
// Allowed becomes false, and the error is ctx's, wrapped.
func (r *Reservation) Wait(ctx context.Context) error {
	if !r.held {
		return nil
	}
	if d := time.Until(r.turn); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			r.Cancel(context.WithoutCancel(ctx))
			return fmt.Errorf("limiter: the request ended while it waited for its turn: %w", context.Cause(ctx))
		}
	}
	r.release()
	return nil
}

// Cancel gives r's turn back when it has not come yet: the next take of
// the key may have it (a token bucket gives back what no later turn
// counts on). Allowed becomes false. It does nothing for a rejected take,
// one admitted now, or one whose turn has come. A store that fails the
// refund loses the turn; its units come back as the window ends.
func (r *Reservation) Cancel(ctx context.Context) {
	if !r.release() || !time.Now().Before(r.turn) {
		return
	}
	_, _ = r.l.Refund(ctx, r.key, r.cost, &r.Result)
	for i := range r.n {
		d := &r.each[i]
		d.Allowed, d.countedIn, d.RetryAfter = false, 0, max(d.RetryAfter, time.Until(r.turn))
	}
}

// release gives back r's waiting place, once; it reports whether r held
// one.
func (r *Reservation) release() bool {
	if !r.held {
		return false
	}
	r.held = false
	r.l.waiting.Add(-1)
	return true
}
