package quota

// slidingWindow is the step function. State: a = current window's start (ms),
// b = units counted in it, c = units counted in the window before.
//
// All arithmetic is on integers scaled by the window length W, so the Go and
// Lua twins agree to the unit: the estimate times W is
// prev*(W-elapsed) + cur*W, and limit*W <= 2^51 keeps it exact.
type slidingWindow struct{}

// roll brings the state's windows forward to now and returns start, current
// and previous counts as they stand at now.
func (slidingWindow) roll(s state, now int64, r rule) (start, cur, prev int64) {
	start, cur, prev = s.a, s.b, int64(s.c)
	if now < start {
		return start, cur, prev // time never goes back for a key
	}
	if now >= start+r.window {
		n := (now - start) / r.window
		if n == 1 {
			prev = cur
		} else {
			prev = 0
		}
		cur = 0
		start += n * r.window
	}
	if cur == 0 && prev == 0 {
		start = now
	}
	return start, cur, prev
}

func (w slidingWindow) take(s *state, now int64, r rule, cost int64) Decision {
	start, kept, keptPrev := w.roll(*s, now, r)
	// A count above the limit (spent under a larger MaxFunc, or another
	// program's) reads as the whole quota spent, and is kept as it is: a
	// take under a smaller limit must not give back what a larger one
	// counted. The Lua twin reads it alike.
	cur, prev := min(kept, r.limit), min(keptPrev, r.limit)
	now = max(now, start)
	elapsed := now - start
	weighted := prev * (r.window - elapsed) // previous window's share, times W
	d := Decision{Limit: int(r.limit)}
	switch {
	case cost > r.limit:
		d.RetryAfter = Never
	// A request may reach a key a few ms late (the manager times a request
	// by its start), and be judged against counts that grew after its time,
	// which may sit above the limit there: a cost of 0 still fits.
	case cost == 0 || weighted+(cur+cost)*r.window <= r.limit*r.window:
		cur += cost
		s.a, s.b, s.c = start, kept+cost, uint32(keptPrev)
		d.Allowed = true
		d.countedIn = start
	default:
		d.RetryAfter = r.span(w.retryAfter(elapsed, cur, prev, r, cost))
	}
	d.Remaining = int(min(r.limit, max(0, r.limit-cur-ceilDiv(weighted, r.window))))
	switch {
	case cur > 0:
		d.ResetAfter = r.span(start + 2*r.window - now)
	case prev > 0:
		d.ResetAfter = r.span(start + r.window - now)
	}
	return d
}

// retryAfter is the time (ms) from elapsed until a request of cost would be
// admitted, given that it is not admitted now and cost <= limit.
func (slidingWindow) retryAfter(elapsed, cur, prev int64, r rule, cost int64) int64 {
	W := r.window
	// Still in this window: need prev*(W-elapsed-t) <= (limit-cur-cost)*W.
	if room := (r.limit - cur - cost) * W; room >= 0 && prev > 0 {
		if t := W - elapsed - room/prev; t < W-elapsed {
			return t
		}
	}
	// In the next window, e after its start, cur has become the previous
	// count: need cur*(W-e) <= (limit-cost)*W.
	e := int64(0)
	if cur > 0 {
		e = max(0, W-((r.limit-cost)*W)/cur)
	}
	return W - elapsed + e
}

func (w slidingWindow) refund(s state, now int64, r rule, cost int64, d Decision) state {
	start, cur, prev := w.roll(s, now, r)
	switch d.countedIn {
	case start:
		cur = max(0, cur-cost)
	case start - r.window:
		prev = max(0, prev-cost)
	default:
		return s
	}
	return state{a: start, b: cur, c: uint32(prev)}
}

func (slidingWindow) expiry(s state, r rule) int64 {
	switch {
	case s.b > 0:
		return s.a + 2*r.window
	case s.c > 0:
		return s.a + r.window
	}
	return 0
}
