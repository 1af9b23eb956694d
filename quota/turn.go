package quota

import "time"

// A take with a turn (Reserve) is admitted when the limits admit it now
// or at a later time within its delay: its cost is counted at once, as a
// take decided at that time (its turn) would count it, and the caller
// waits until then. Nothing else changes in the step functions, because
// each already lets no take of a key be decided before the time its state
// holds, the key's clock (clockOf): a window that starts at the turn, a
// bucket updated at it, a log entry made at it. Every later take of the
// key is decided at that time or after it, so that the turns and the
// takes made now together never exceed what the algorithm admits at the
// times they run. The Lua twins do the same, in the same script call
// (head.lua's tries).
//
// A turn given back (a waiter whose request ended) is the refund of its
// take, and gives back only what no later turn counts on, as
// golang.org/x/time/rate's Reservation.Cancel does: a bucket the units
// that later turns leave (tokenBucket.untaken), its clock moving back with
// them (tokenBucket.back); a window the units of its window while that
// window is the key's latest (a state keeps one), its clock staying at
// that window's start even when it empties (fixedWindow.roll, expiry); a
// log the turn's entries when later ones follow them (its clock is its
// newest entry, which it keeps). What is not given back stays counted:
// less is admitted, never more.

// maxTurnTries bounds the decisions a take with a turn makes in one call:
// the first, at the key's clock; the second, where every limit's
// RetryAfter says the take fits; more only when rounding to a limit's
// steps left it short.
const maxTurnTries = 4

// clockOf is the time (steps) that s, read as plausible, holds the key
// at: a take decided before it is decided at it, for each algorithm's
// own reason (fixedWindow.roll, slidingWindow.take, tokenBucket.take,
// slidingLog.live). 0 when s holds nothing.
func (a Algorithm) clockOf(s state) int64 {
	switch a {
	case FixedWindow:
		start, _ := fixedWindow{}.read(s)
		return start
	case SlidingWindow:
		start, _, _ := slidingWindow{}.read(s)
		return start
	case SlidingLog:
		if newest, count, _ := (slidingLog{}).read(s); count > 0 {
			return newest
		}
		return 0
	}
	last, _ := tokenBucket{}.read(s)
	return last
}

// decideTurnInto is decideInto for a take that may wait up to ls.delay ms
// for its turn. It decides at now, where each limit decides at the key's
// clock (clockOf) when that lies ahead; when a limit rejects the take, or
// the limits decided at different times, it decides again at the time
// they all admit it (the latest limit's time plus its RetryAfter, or the
// latest clock), so that every limit decides at the same time, the turn.
// An admitted take's v.wait is its turn less now, and its answer is the
// state at its turn. A take whose turn lies beyond the delay is rejected,
// counting nothing, with each limit's RetryAfter measured from now. A take
// of cost 0 waits for nothing: it is decided as decideInto decides it. The
// Lua twin (head.lua's tries) decides alike.
func (a Algorithm) decideTurnInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) {
	if cost == 0 {
		a.decideInto(v, sts, lg, now, ls, 0) // it counts nothing: it waits for nothing
		return
	}
	a.plausibleAll(sts, now, ls, true)
	t := now
	for try := 1; ; try++ {
		next := *sts
		*v = Result{}
		a.decideRead(v, &next, lg, t, ls, cost)
		clock, later := t, t+1
		for i := range ls.n {
			r, d := &ls.r[i], &v.each[i]
			decided := max(r.at(t), a.clockOf(sts[i])) // steps
			clock = max(clock, decided*r.stepMillis())
			switch {
			case d.RetryAfter == Never:
				later = -1
			case later >= 0:
				later = max(later, decided*r.stepMillis()+d.RetryAfter.Milliseconds())
			}
		}
		if v.Allowed() {
			if clock == t {
				*sts = next
				v.wait = t - now
				return
			}
			later = clock
		}
		if later < 0 || later-now > ls.delay || try == maxTurnTries {
			v.rejectFrom(t-now, later-now)
			return
		}
		t = later
	}
}

// rejectFrom makes v, a decision at ahead ms after now, the rejection of
// a take at now that counted nothing: its waits and resets are measured
// from now, and when the take fits at all (retry >= 0, ms from now), its
// RetryAfter is at least retry.
func (v *Result) rejectFrom(ahead, retry int64) {
	shift := millis(ahead)
	for i := range v.n {
		d := &v.each[i]
		d.Allowed, d.countedIn = false, 0
		if d.RetryAfter != Never {
			d.RetryAfter = max(d.RetryAfter+shift, millis(max(0, retry)))
		}
		if d.ResetAfter > 0 && d.ResetAfter < Never-shift {
			d.ResetAfter += shift
		}
	}
	v.granted, v.wait = 0, 0
}

// Delay is how long after the decision the take's turn comes: 0 for a
// take admitted at once, and for every take but Reserve's.
func (v *Result) Delay() time.Duration { return millis(v.wait) }
