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
	return b.state(last, max(0, debt-credit))
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
		return 0
	}
	return last + ceilDiv(debt, r.max)
}
