package quota

// fixedWindow is the fixed window's step function, the twin of
// storage/redis/fixed_window.lua, in its order: the state, its
// plausibility, the adjustments, the take and the expiry. A window starts
// at a key's first counted unit and counts up to the limit until it ends;
// the next take starts a new one.
//
// State: start, the window's start (steps), and count, the units counted
// in it (read and state name them, as the Lua's locals).
type fixedWindow struct{}

// read is s as the fixed window names it.
func (fixedWindow) read(s state) (start, count int64) { return s.a, s.b }

// state is the state of start and count.
func (fixedWindow) state(start, count int64) state { return state{a: start, b: count} }

// plausible reads s as a state of r at now (steps; see
// Algorithm.plausibleAll): a start too far ahead (rule.tooFarAhead) is no
// state; for a take, a count above the limit is the whole quota spent,
// which an adjustment keeps as it is (see adjustAll).
func (w fixedWindow) plausible(s *state, now int64, r rule, take bool) {
	start, count := w.read(*s)
	if r.tooFarAhead(start, now) {
		start, count = 0, 0
	}
	if take {
		count = min(count, r.max)
	}
	*s = w.state(start, max(0, count))
}

// adjust applies adj of cost units at now (see adjustment). A refund
// credits the window that counted the take (d.countedIn) and a reward the
// window running, while it runs; a penalty counts into the window running
// (a new one if none runs), up to the whole quota.
func (w fixedWindow) adjust(adj adjustment, s state, now int64, r rule, cost int64, d Decision) state {
	start, count := w.read(s)
	if adj != penalty {
		if count > 0 && (adj == reward || start == d.countedIn) && now < start+r.window {
			count = max(0, count-cost)
		}
		return w.state(start, count)
	}
	start, count, _ = w.roll(start, count, now, r)
	return w.state(start, max(count, min(r.max, count+min(cost, r.max))))
}

// roll brings the window to now (steps): one that has ended, or counts
// nothing, gives way to a new one from now. Time never goes back for a
// key: the now it returns is not before the window's start, even one
// that counts nothing (a turn given back, see clockOf).
func (fixedWindow) roll(start, count, now int64, r rule) (int64, int64, int64) {
	now = max(now, start)
	if count == 0 || now >= start+r.window {
		start, count = now, 0
	}
	return start, count, now
}

func (w fixedWindow) take(s *state, now int64, r rule, cost int64) Decision {
	start, count := w.read(*s)
	start, count, now = w.roll(start, count, now, r)
	d := Decision{Limit: int(r.max)}
	switch {
	case cost > r.max:
		d.RetryAfter = Never
	// A take of 0 fits whatever the count: an adjustment's answer, of a
	// count kept above this rule's limit (see adjustAll).
	case cost == 0 || count+cost <= r.max:
		count += cost
		*s = w.state(start, count)
		d.Allowed = true
		d.countedIn = start
	default:
		d.RetryAfter = r.span(start + r.window - now)
	}
	d.Remaining = int(max(0, r.max-count))
	if count > 0 {
		d.ResetAfter = r.span(start + r.window - now)
	}
	return d
}

func (w fixedWindow) expiry(s state, r rule) int64 {
	start, count := w.read(s)
	if count == 0 {
		return start // a window ahead holds the key's clock until it starts
	}
	return start + r.window
}
