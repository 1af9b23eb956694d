package quota

// tokenBucket is the token bucket's step function, a GCRA in integer form,
// the twin of storage/redis/token_bucket.lua, in its order: the state, its
// plausibility, the refill to now, the adjustments, the take and the
// expiry.
//
// State: last, the time of the last update (steps), and debt, the tokens
// taken and not yet refilled, in units of 1/W token, where W is the window
// in steps (read and state name them, as the Lua's locals). In those units
// a token is W, the capacity is burst*W, and the bucket refills limit
// units per step, so every step is exact integer arithmetic: burst*W <=
// 2^51.
type tokenBucket struct{}

// read is s as the token bucket names it.
func (tokenBucket) read(s state) (last, debt int64) { return s.a, s.b }

// state is the state of last and debt.
func (tokenBucket) state(last, debt int64) state { return state{a: last, b: debt} }

// plausible reads s as a state of r at now (steps; see
// Algorithm.plausibleAll): a last update too far ahead
// (rule.tooFarAhead) is no state; for a take, a debt above the capacity
// is a bucket taken empty, which an adjustment keeps as it is (see
// adjustAll).
func (b tokenBucket) plausible(s *state, now int64, r rule, take bool) {
	last, debt := b.read(*s)
	if r.tooFarAhead(last, now) {
		last, debt = 0, 0
	}
	if take {
		debt = min(debt, r.burst*r.window)
	}
	*s = b.state(last, max(0, debt))
}

// debtAt is the debt left at now after refilling since last.
func (tokenBucket) debtAt(last, debt, now int64, r rule) int64 {
	elapsed := now - last
	if elapsed <= 0 {
		return debt
	}
	if elapsed >= ceilDiv(debt, r.max) {
		return 0
	}
	return debt - elapsed*r.max
}

// adjust applies adj of cost units at now (see adjustment). A penalty adds
// its cost to the debt refilled to now, up to the whole burst. A reward
// and a refund take their credit off the debt as it was last updated,
// without refilling it to now: a refill at this rule's rate would give
// back more than the cost when another rule, of a lower rate, is the one
// in force (a MaxFunc).
//
// A refund gives back only what of the request's cost has not refilled
// yet: by d.countedIn the bucket would have refilled it anyway, and
// crediting it again would let a later request through twice (a slow
// failed request refunded after the bucket had already refilled).
func (b tokenBucket) adjust(adj adjustment, s state, now int64, r rule, cost int64, d Decision) state {
	last, debt := b.read(s)
	switch adj {
	case penalty:
		debt = b.debtAt(last, debt, now, r)
		return b.state(max(now, last), max(debt, min(r.burst*r.window, debt+min(cost, r.burst)*r.window)))
	case reward:
		return b.state(last, max(0, debt-min(cost, r.burst)*r.window))
	}
	credit := int64(0)
	if ahead := d.countedIn - now; ahead > 0 {
		// min(cost*W, ahead*limit), without forming ahead*limit when it
		// would be larger than cost*W (and might overflow); cost is at most
		// a full bucket, so that cost*W cannot overflow either.
		credit = min(cost, r.burst) * r.window
		if ahead < ceilDiv(credit, r.max) {
			credit = ahead * r.max
		}
	}
	if last > now {
		credit = min(credit, b.untaken(last, debt, r, cost, d.countedIn))
		return b.state(b.back(last, max(0, debt-credit), now, r))
	}
	return b.state(last, max(0, debt-credit))
}

// untaken is what a refund of cost, taken up to countedIn, may give
// back to a bucket updated at last, ahead of now: a turn given back
// (Reserve). Turns taken after it count on its tokens: the debt beyond
// countedIn is theirs, and the refund gives back only what of its cost
// they left. (A credit of the whole cost would let the next take in at
// the last turn's time, beside it.) The Lua twin reads it alike.
func (tokenBucket) untaken(last, debt int64, r rule, cost, countedIn int64) int64 {
	whole := min(cost, r.burst) * r.window
	later := debt // the units that refill after countedIn
	if gap := countedIn - last; gap >= 0 {
		if gap >= ceilDiv(debt, r.max) {
			return whole
		}
		later -= gap * r.max
	} else if -gap >= ceilDiv(whole, r.max) {
		return 0 // what followed it is more than its cost
	} else {
		later -= gap * r.max
	}
	return max(0, whole-later)
}

// back moves a bucket updated at last, ahead of now, with debt, as far
// back toward now as its debt stays within the capacity: the same bucket
// from then on (last*limit + debt is kept), whose clock is no later than
// the turns still counted need. A turn given back (Reserve) then takes
// the key's clock back with it, as x/time/rate's Cancel moves its last
// event back: the next take may have the turn. The debt it reads at a
// time before the turns still ahead counts their units already, so a take
// decided there waits for room beside them (never runs beside them).
func (tokenBucket) back(last, debt, now int64, r rule) (int64, int64) {
	room := r.burst*r.window - debt
	if room <= 0 {
		return last, debt
	}
	steps := min(last-now, room/r.max)
	return last - steps, debt + steps*r.max
}

func (b tokenBucket) take(s *state, now int64, r rule, cost int64) Decision {
	last, debt := b.read(*s)
	debt = b.debtAt(last, debt, now, r)
	capacity := r.burst * r.window
	d := Decision{Limit: int(r.burst)}
	switch {
	case cost > r.burst:
		d.RetryAfter = Never
	// A take of 0 fits whatever the debt: an adjustment's answer, of a
	// debt kept above this rule's capacity (see adjustAll).
	case cost == 0 || debt+cost*r.window <= capacity:
		debt += cost * r.window
		last = max(now, last) // time never goes back for a key
		*s = b.state(last, debt)
		d.Allowed = true
		d.countedIn = last + debt/r.max // when this cost will have refilled (rounded down)
	default:
		d.RetryAfter = r.span(ceilDiv(debt+cost*r.window-capacity, r.max))
	}
	d.Remaining = int(max(0, r.burst-ceilDiv(debt, r.window)))
	d.ResetAfter = r.span(ceilDiv(debt, r.max))
	return d
}

func (b tokenBucket) expiry(s state, r rule) int64 {
	last, debt := b.read(s)
	if debt == 0 {
		return last // an update ahead holds the key's clock until then
	}
	return last + ceilDiv(debt, r.max)
}
