package quota

// fixedWindow is the step function. State: a = window start (ms),
// b = units counted in that window.
type fixedWindow struct{}

func (fixedWindow) take(s *state, now int64, r rule, cost int64) Decision {
	start, count := s.a, s.b
	if count > 0 {
		now = max(now, start) // time never goes back for a key
	}
	if count == 0 || now >= start+r.window {
		start, count = now, 0
	}
	d := Decision{Limit: int(r.limit)}
	switch {
	case cost > r.limit:
		d.RetryAfter = Never
	// A take of 0 fits whatever the count: a refund's answer, of a
	// count kept above this rule's limit (see refundAll).
	case cost == 0 || count+cost <= r.limit:
		count += cost
		s.a, s.b = start, count
		d.Allowed = true
		d.countedIn = start
	default:
		d.RetryAfter = r.span(start + r.window - now)
	}
	d.Remaining = int(max(0, r.limit-count))
	if count > 0 {
		d.ResetAfter = r.span(start + r.window - now)
	}
	return d
}

func (fixedWindow) refund(s state, now int64, r rule, cost int64, d Decision) state {
	if s.b > 0 && s.a == d.countedIn && now < s.a+r.window {
		s.b = max(0, s.b-cost)
	}
	return s
}

func (fixedWindow) expiry(s state, r rule) int64 {
	if s.b == 0 {
		return 0
	}
	return s.a + r.window
}
