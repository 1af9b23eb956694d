package quota

// An adjustment changes what a key has spent outside a take: a refund
// gives back the cost of one admitted take, in the window that counted
// it; a penalty counts units whether or not the limit has room for them
// (up to the whole quota: a key never owes more than it could spend, so it
// is never held off for longer than the rule itself would hold it); a
// reward gives units back from what the key has spent now, whichever
// window they were counted in. None gives back more than its own units: a
// count above the rule's quota (spent under a larger MaxFunc) is kept,
// less the units, and a penalty never lowers it.
//
// Each algorithm's adjust applies them, in its file, as its Lua twin does
// under the script's refund flag; adjustAll applies one to every limit of
// a key.
type adjustment uint8

const (
	refundTaken adjustment = iota // the Refund of an admitted take
	penalty                       // Penalize
	reward                        // Reward
)

// String names adj in errors: "refund", "penalize" or "reward".
func (adj adjustment) String() string {
	switch adj {
	case penalty:
		return "penalize"
	case reward:
		return "reward"
	}
	return "refund"
}

// adjust applies adj of cost units to s at now (steps); for a refund, d is
// the admitted take's decision. SlidingLog's needs its log
// (slidingLog.adjust).
func (a Algorithm) adjust(adj adjustment, s state, now int64, r rule, cost int64, d Decision) state {
	switch a {
	case FixedWindow:
		return fixedWindow{}.adjust(adj, s, now, r, cost, d)
	case SlidingWindow:
		return slidingWindow{}.adjust(adj, s, now, r, cost, d)
	case SlidingLog:
		panic("limiter: internal error: SlidingLog's adjustments need its log (slidingLog.adjust)")
	}
	return tokenBucket{}.adjust(adj, s, now, r, cost, d)
}
