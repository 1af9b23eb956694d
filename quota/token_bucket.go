package quota

// tokenBucket is the step function, a GCRA in integer form. State: a = time
// of the last update (ms), b = the bucket's debt (tokens taken and not yet
// refilled) in units of 1/W token, where W is the window in ms. In those
// units a token is W, the capacity is burst*W, and the bucket refills limit
// units per ms, so every step is exact integer arithmetic: burst*W <= 2^51.
type tokenBucket struct{}

// debtAt is the debt left at now after refilling since the last update.
func (tokenBucket) debtAt(s state, now int64, r rule) int64 {
	elapsed := now - s.a
	if elapsed <= 0 {
		return s.b
	}
	if elapsed >= ceilDiv(s.b, r.limit) {
		return 0
	}
	return s.b - elapsed*r.limit
}

func (b tokenBucket) take(s *state, now int64, r rule, cost int64) Decision {
	debt := b.debtAt(*s, now, r)
	capacity := r.burst * r.window
	d := Decision{Limit: int(r.burst)}
	switch {
	case cost > r.burst:
		d.RetryAfter = Never
	// A take of 0 fits whatever the debt: a refund's answer, of a debt
	// kept above this rule's capacity (see refundAll).
	case cost == 0 || debt+cost*r.window <= capacity:
		debt += cost * r.window
		s.a, s.b = max(now, s.a), debt // time never goes back for a key
		d.Allowed = true
		d.countedIn = s.a + debt/r.limit // when this cost will have refilled (rounded down)
	default:
		d.RetryAfter = r.span(ceilDiv(debt+cost*r.window-capacity, r.limit))
	}
	d.Remaining = int(max(0, r.burst-ceilDiv(debt, r.window)))
	d.ResetAfter = r.span(ceilDiv(debt, r.limit))
	return d
}

// refund gives back what of the request's cost has not refilled yet: by
// d.countedIn the bucket would have refilled it anyway, and crediting it
// again would let a later request through twice (a slow failed request
// refunded after the bucket had already refilled). It takes the credit
// off the debt as it was last updated, without refilling it to now: a
// refill at this rule's rate would give back more than the cost when
// another rule, of a lower rate, is the one in force (a MaxFunc).
func (b tokenBucket) refund(s state, now int64, r rule, cost int64, d Decision) state {
	credit := int64(0)
	if ahead := d.countedIn - now; ahead > 0 {
		// min(cost*W, ahead*limit), without forming ahead*limit when it
		// would be larger than cost*W (and might overflow); cost is at most
		// a full bucket, so that cost*W cannot overflow either.
		credit = min(cost, r.burst) * r.window
		if ahead < ceilDiv(credit, r.limit) {
			credit = ahead * r.limit
		}
	}
	return state{a: s.a, b: max(0, s.b-credit)}
}

func (tokenBucket) expiry(s state, r rule) int64 {
	if s.b == 0 {
		return 0
	}
	return s.a + ceilDiv(s.b, r.limit)
}
