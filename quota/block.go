package quota

import "time"

// maxBlock is the longest Config.BlockFor and Config.MinInterval.
const maxBlock = 365 * 24 * time.Hour

// keyEnds names the state a key keeps after its limits' when it has rules
// of its own (see limits.states), or an operator's hold: blockEnd, when
// its block ends, and gapEnd, when the gap since its last admitted take
// does (ms; 0: none), as head.lua names them. A hold (Limiter.Block) is
// both ends at its own end: a version that knows no holds keeps it as
// another version's ends (see head.lua).
type keyEnds struct{}

// read is s as the key's rules name it, and the end of an operator's hold
// (0: none), as they stand at now: a hold further ahead than the longest
// block was not set near now, and holds nothing.
func (keyEnds) read(s state, now int64) (blockEnd, gapEnd, holdEnd int64) {
	if s.a == s.b && s.a > 0 {
		if s.a > now+maxBlock.Milliseconds() {
			return 0, 0, 0
		}
		return 0, 0, s.a
	}
	return s.a, s.b, 0
}

// holding reports whether s holds an operator's hold at now.
func (keyEnds) holding(s state, now int64) bool {
	_, _, holdEnd := keyEnds{}.read(s, now)
	return holdEnd > now
}

// state is the state of blockEnd and gapEnd, or of a hold that ends at
// holdEnd (after now).
func (keyEnds) state(blockEnd, gapEnd, holdEnd, now int64) state {
	if holdEnd > now {
		return state{a: holdEnd, b: holdEnd}
	}
	if blockEnd == gapEnd && blockEnd > 0 {
		// A block and a gap that end on one ms would read as a hold: the
		// gap ends a ms sooner, which the block covers.
		gapEnd--
	}
	return state{a: blockEnd, b: gapEnd}
}

// decideKeyInto is decideInto (decideUpToInto for ls.upTo) under the rules
// a key keeps beside its limits' counts, in the state after its limits'
// (keyEnds): ls.block, and ls.gap, the least time between two admitted
// takes; and under an operator's hold, there or in hold (ms; the
// in-memory manager keeps holds apart).
//
//   - A key whose block or hold has not ended is rejected whatever its
//     counts (rejectHeld), and its RetryAfter is when the same take would
//     be admitted: once the block, and for a take of a cost the gap, has
//     ended, and its limits have room for it.
//   - A take of a cost above 0 before the gap since the last admitted one
//     has passed is rejected in the same way.
//   - A take the limits reject, or one rejected for the gap, blocks the
//     key until now + ls.block, unless no wait would admit it (a cost
//     above a quota: RetryAfter Never). A take rejected during a block
//     does not draw it out.
//   - An admitted take of a cost above 0 starts the gap.
//
// An end further ahead than a block or a gap lasts (another setting, or a
// clock that went back) holds the key no longer than they would. It
// reports whether the ends changed. The Lua twins do the same.
func (a Algorithm) decideKeyInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost, hold int64) (changed bool) {
	// A rejected take keeps its limits' states as they were read, and not
	// as its decision read them (plausible): a block it starts is written
	// with them, and must not write a count of a larger MaxFunc down to
	// this take's limit. The Lua twins write them as they read them.
	read := *sts
	blockEnd, gapEnd, holdEnd := keyEnds{}.read(sts[ls.n], now)
	block, gap := a.decideEnds(v, sts, lg, now, ls, cost, blockEnd, gapEnd, max(holdEnd, hold))
	if !v.Allowed() || cost == 0 {
		copy(sts[:ls.n], read[:ls.n])
	}
	if block == blockEnd && gap == gapEnd {
		return false
	}
	if ls.keyRules() {
		// Another version's end left beside this one's could fall on its
		// ms, and two equal ends read as a hold.
		block, gap = ls.ownEnds(block, gap)
	}
	sts[ls.n] = keyEnds{}.state(block, gap, holdEnd, now)
	return true
}

// decideEnds is decideKeyInto on the ends it read, which it returns as the
// decision leaves them.
func (a Algorithm) decideEnds(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64, blockEnd, gapEnd, holdEnd int64) (int64, int64) {
	// The end of a rule this limiter does not have was set by another
	// version of it (a rolling deploy): not enforced (nor kept: see
	// limits.stored).
	blocking, spacing := ls.block > 0, ls.gap > 0
	if blocking {
		blockEnd = min(blockEnd, now+ls.block)
	}
	if spacing {
		gapEnd = min(gapEnd, now+ls.gap)
	}
	// The rest of the gap, which a take of a cost waits out even when a
	// block ends first (it would be rejected for the gap then).
	gapRest := int64(0)
	if spacing && cost > 0 {
		gapRest = gapEnd - now
	}
	heldTo := holdEnd
	if blocking {
		heldTo = max(heldTo, blockEnd)
	}
	if heldTo > now {
		a.rejectHeld(v, sts, lg, now, ls, cost, max(heldTo-now, gapRest))
		return blockEnd, gapEnd
	}
	if gapRest > 0 {
		a.rejectHeld(v, sts, lg, now, ls, cost, gapRest)
	} else {
		if ls.upTo {
			a.decideUpToInto(v, sts, lg, now, ls, cost)
			cost = v.granted
		} else {
			a.decideInto(v, sts, lg, now, ls, cost)
		}
		if v.Allowed() {
			if cost > 0 && spacing {
				gapEnd = now + ls.gap // the gap starts
			}
			return blockEnd, gapEnd
		}
	}
	if blocking && v.RetryAfter() != Never {
		blockEnd = now + ls.block
		v.block(ls.block)
	}
	return blockEnd, gapEnd
}

// rejectHeld makes v the rejection of a take of cost that a block or a
// gap holds off for rest more ms, on the states sts, which it leaves as
// they are. Each limit answers as a take of 0 would, with nothing
// Remaining, and RetryAfter when the take would be admitted: after rest,
// and once the limit has room for the cost, which its own RetryAfter for
// the take says now (a limit's room only grows while nothing is counted,
// so the later of the two is when it admits the take; Never when it never
// will). A take up to a cost (ls.upTo) waits for room for one unit. The
// Lua twins find the waits in a pass at the cost (pass 0) before the pass
// at cost 0.
func (a Algorithm) rejectHeld(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost, rest int64) {
	if ls.upTo {
		cost = min(cost, 1)
	}
	var wait Result
	probe := *sts
	a.decideInto(&wait, &probe, lg, now, ls, cost)
	probe = *sts
	a.decideInto(v, &probe, lg, now, ls, 0)
	for i := range v.n {
		v.each[i].RetryAfter = wait.each[i].RetryAfter // 0 where the cost fits now
	}
	v.block(rest)
}

// block makes v the rejection of a key held off for rest more ms: each
// limit's RetryAfter, and its ResetAfter, last at least that long; a
// RetryAfter of Never stays Never.
func (v *Result) block(rest int64) {
	wait := millis(rest)
	for i := range v.n {
		d := &v.each[i]
		d.Allowed, d.Remaining, d.countedIn = false, 0, 0
		d.ResetAfter = max(d.ResetAfter, wait)
		if d.RetryAfter != Never {
			d.RetryAfter = max(d.RetryAfter, wait)
			d.ResetAfter = max(d.ResetAfter, d.RetryAfter)
		}
	}
}

// peekInto makes v what a take of 1 would find at now, counting nothing
// (Limiter.Peek): each limit's state as a take of 0 sees it, its
// RetryAfter the wait of the take of 1, every part Allowed when that take
// would be admitted. It returns how long (ms) the key is held off whatever
// its counts: by an operator's hold (in its ends, or hold), a block, or
// the gap. sts is left as it is. The Lua twins do the same.
func (a Algorithm) peekInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, hold int64) int64 {
	blockEnd, gapEnd, holdEnd := keyEnds{}.read(sts[ls.n], now)
	heldTo := max(holdEnd, hold)
	if ls.block > 0 {
		heldTo = max(heldTo, min(blockEnd, now+ls.block))
	}
	rest := max(0, heldTo-now)
	if ls.gap > 0 {
		rest = max(rest, min(gapEnd, now+ls.gap)-now)
	}
	var wait Result
	probe := *sts
	a.decideInto(&wait, &probe, lg, now, ls, 1)
	probe = *sts
	a.decideInto(v, &probe, lg, now, ls, 0)
	allowed := rest == 0
	for i := range v.n {
		d := &v.each[i]
		d.RetryAfter, d.countedIn = wait.each[i].RetryAfter, 0
		if d.RetryAfter != 0 {
			allowed = false
		}
		if d.RetryAfter != Never {
			d.RetryAfter = max(d.RetryAfter, millis(rest))
		}
	}
	for i := range v.n {
		v.each[i].Allowed = allowed
	}
	return rest
}

// clampEnds cuts the ends of ls's rules that lie further ahead than its
// block or gap lasts, as head.lua does for every call (an adjustment's
// too); a hold is left as it is.
func (ls *limits) clampEnds(sts *[maxStates]state, now int64) {
	blockEnd, gapEnd, holdEnd := keyEnds{}.read(sts[ls.n], now)
	if holdEnd > 0 {
		return
	}
	if ls.block > 0 {
		blockEnd = min(blockEnd, now+ls.block)
	}
	if ls.gap > 0 {
		gapEnd = min(gapEnd, now+ls.gap)
	}
	sts[ls.n] = keyEnds{}.state(blockEnd, gapEnd, 0, now)
}

// holdUntil is when a hold that an operator sets at now for d ms ends: a
// block that ends later, whose place it takes, ends it no sooner (the Lua
// twins do the same).
func (ls *limits) holdUntil(s state, now, d int64) int64 {
	end := now + d
	if ls.block > 0 {
		blockEnd, _, _ := keyEnds{}.read(s, now)
		end = max(end, min(blockEnd, now+ls.block))
	}
	return end
}
