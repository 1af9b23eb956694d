package quota

// An adjustment changes what a key has spent outside a request: a penalty
// counts units whether or not the limit has room for them (up to the whole
// quota: a key never owes more than it could spend, so it is never held
// off for longer than the rule itself would hold it), and a reward gives
// units back from what the key has spent now, whichever window they were
// counted in. A refund, by contrast, gives back the cost of one admitted
// request, in the window that counted it. None gives back more than its
// own units: a count above the rule's quota (spent under a larger MaxFunc)
// is kept, less the units, and a penalty never lowers it.
type adjustment uint8

const (
	refundTaken adjustment = iota // the Refund of an admitted take
	penalty                       // Penalize
	reward                        // Reward
)

// adjust applies adj of cost units to s at now; for a refund, d is the
// admitted take's decision.
func (a Algorithm) adjust(adj adjustment, s state, now int64, r rule, cost int64, d Decision) state {
	switch adj {
	case penalty:
		return a.penalize(s, now, r, cost)
	case reward:
		return a.reward(s, now, r, cost)
	}
	return a.refund(s, now, r, cost, d)
}

// penalize counts cost units at now, up to the whole quota.
func (a Algorithm) penalize(s state, now int64, r rule, cost int64) state {
	switch a {
	case FixedWindow:
		return fixedWindow{}.penalize(s, now, r, cost)
	case SlidingWindow:
		return slidingWindow{}.penalize(s, now, r, cost)
	case SlidingLog:
		panic("limiter: internal error: SlidingLog's penalty needs its log (slidingLog.adjust)")
	}
	return tokenBucket{}.penalize(s, now, r, cost)
}

// reward gives cost units back from what is spent at now.
func (a Algorithm) reward(s state, now int64, r rule, cost int64) state {
	switch a {
	case FixedWindow:
		return fixedWindow{}.reward(s, now, r, cost)
	case SlidingWindow:
		return slidingWindow{}.reward(s, now, r, cost)
	case SlidingLog:
		panic("limiter: internal error: SlidingLog's reward needs its log (slidingLog.adjust)")
	}
	return tokenBucket{}.reward(s, now, r, cost)
}

func (fixedWindow) penalize(s state, now int64, r rule, cost int64) state {
	start, count := s.a, s.b
	if count > 0 {
		now = max(now, start) // time never goes back for a key
	}
	if count == 0 || now >= start+r.window {
		start, count = now, 0
	}
	return state{a: start, b: max(count, min(r.limit, count+min(cost, r.limit)))}
}

func (fixedWindow) reward(s state, now int64, r rule, cost int64) state {
	if s.b > 0 && now < s.a+r.window {
		s.b = max(0, s.b-cost)
	}
	return s
}

func (w slidingWindow) penalize(s state, now int64, r rule, cost int64) state {
	start, cur, prev := w.roll(s, now, r)
	return state{a: start, b: max(cur, min(r.limit, cur+min(cost, r.limit))), c: uint32(prev)}
}

// reward takes the units back from the running window first, then from
// the one before it.
func (w slidingWindow) reward(s state, now int64, r rule, cost int64) state {
	start, cur, prev := w.roll(s, now, r)
	fromCur := min(cur, cost)
	cur, prev = cur-fromCur, max(0, prev-(cost-fromCur))
	if cur == 0 && prev == 0 && now >= start {
		start = now // an empty key starts afresh, as the take's roll has it
	}
	return state{a: start, b: cur, c: uint32(prev)}
}

func (b tokenBucket) penalize(s state, now int64, r rule, cost int64) state {
	debt := b.debtAt(s, now, r)
	return state{a: max(now, s.a), b: max(debt, min(r.burst*r.window, debt+min(cost, r.burst)*r.window))}
}

// reward takes its credit off the debt as it was last updated, as refund
// does.
func (b tokenBucket) reward(s state, now int64, r rule, cost int64) state {
	return state{a: s.a, b: max(0, s.b-min(cost, r.burst)*r.window)}
}
