package quota

// slidingWindow is the sliding window's step function, the twin of
// storage/redis/sliding_window.lua, in its order: the state, its
// plausibility, the roll to now, the adjustments, the take and the expiry.
//
// State: start, the running window's start (steps), cur, the units counted
// in it, and prev, those counted in the window before (read and state name
// them, as the Lua's locals).
//
// All arithmetic is on integers scaled by the window length W, so the Go and
// Lua twins agree to the unit: the estimate times W is
// prev*(W-elapsed) + cur*W, and limit*W <= 2^51 keeps it exact.
type slidingWindow struct{}

// read is s as the sliding window names it.
func (slidingWindow) read(s state) (start, cur, prev int64) { return s.a, s.b, int64(s.c) }

// state is the state of start, cur and prev.
func (slidingWindow) state(start, cur, prev int64) state {
	return state{a: start, b: cur, c: uint32(prev)}
}

// plausible reads s as a state of r at now (steps; see
// Algorithm.plausibleAll): a start too far ahead (rule.tooFarAhead) is no
// state. Counts above the limit are kept as they are: take reads them as
// the whole quota spent.
func (w slidingWindow) plausible(s *state, now int64, r rule, _ bool) {
	start, cur, prev := w.read(*s)
	if r.tooFarAhead(start, now) {
		start, cur, prev = 0, 0, 0
	}
	*s = w.state(start, max(0, cur), prev)
}

// roll brings the windows forward to now and returns start, cur and prev
// as they stand at now.
func (slidingWindow) roll(start, cur, prev, now int64, r rule) (int64, int64, int64) {
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

// adjust applies adj of cost units at now (see adjustment): a penalty
// counts into the window running, up to the whole quota; a reward takes
// the units back from the window running first, then from the one before
// it; a refund credits the window that counted the take (d.countedIn), if
// it still counts.
func (w slidingWindow) adjust(adj adjustment, s state, now int64, r rule, cost int64, d Decision) state {
	start, cur, prev := w.read(s)
	start, cur, prev = w.roll(start, cur, prev, now, r)
	switch adj {
	case penalty:
		cur = max(cur, min(r.max, cur+min(cost, r.max)))
	case reward:
		fromCur := min(cur, cost)
		cur, prev = cur-fromCur, max(0, prev-(cost-fromCur))
		if cur == 0 && prev == 0 && now >= start {
			start = now // an empty key starts afresh, as the take's roll has it
		}
	default:
		switch d.countedIn {
		case start:
			cur = max(0, cur-cost)
		case start - r.window:
			prev = max(0, prev-cost)
		default:
			return s
		}
	}
	return w.state(start, cur, prev)
}

func (w slidingWindow) take(s *state, now int64, r rule, cost int64) Decision {
	start, keptCur, keptPrev := w.read(*s)
	start, keptCur, keptPrev = w.roll(start, keptCur, keptPrev, now, r)
	// A count above the limit (spent under a larger MaxFunc, or another
	// program's) reads as the whole quota spent, and is kept as it is: a
	// take under a smaller limit must not give back what a larger one
	// counted. The Lua twin reads it alike.
	cur, prev := min(keptCur, r.max), min(keptPrev, r.max)
	now = max(now, start)
	elapsed := now - start
	weighted := prev * (r.window - elapsed) // previous window's share, times W
	d := Decision{Limit: int(r.max)}
	switch {
	case cost > r.max:
		d.RetryAfter = Never
	// A request may reach a key a few ms late (the manager times a request
	// by its start), and be judged against counts that grew after its time,
	// which may sit above the limit there: a cost of 0 still fits.
	case cost == 0 || weighted+(cur+cost)*r.window <= r.max*r.window:
		cur += cost
		*s = w.state(start, keptCur+cost, keptPrev)
		d.Allowed = true
		d.countedIn = start
	default:
		d.RetryAfter = r.span(w.retryAfter(elapsed, cur, prev, r, cost))
	}
	d.Remaining = int(min(r.max, max(0, r.max-cur-ceilDiv(weighted, r.window))))
	switch {
	case cur > 0:
		d.ResetAfter = r.span(start + 2*r.window - now)
	case prev > 0:
		d.ResetAfter = r.span(start + r.window - now)
	}
	return d
}

// retryAfter is the time (steps) from elapsed until a request of cost would be
// admitted, given that it is not admitted now and cost <= limit.
func (slidingWindow) retryAfter(elapsed, cur, prev int64, r rule, cost int64) int64 {
	W := r.window
	// Still in this window: need prev*(W-elapsed-t) <= (limit-cur-cost)*W.
	if room := (r.max - cur - cost) * W; room >= 0 && prev > 0 {
		if t := W - elapsed - room/prev; t < W-elapsed {
			return t
		}
	}
	// In the next window, e after its start, cur has become the previous
	// count: need cur*(W-e) <= (limit-cost)*W.
	e := int64(0)
	if cur > 0 {
		e = max(0, W-((r.max-cost)*W)/cur)
	}
	return W - elapsed + e
}

func (w slidingWindow) expiry(s state, r rule) int64 {
	start, cur, prev := w.read(s)
	switch {
	case cur > 0:
		return start + 2*r.window
	case prev > 0:
		return start + r.window
	}
	return start // a window ahead holds the key's clock until it starts
}
