package quota

import "time"

// maxBlock is the longest Config.BlockFor and Config.MinInterval.
const maxBlock = 365 * 24 * time.Hour

// keyEnds names the state a key keeps after its limits' when it has rules
// of its own (see limits.states): blockEnd, when its block ends, and
// gapEnd, when the gap since its last admitted take does (ms; 0: none),
// as head.lua names them.
type keyEnds struct{}

// read is s as the key's rules name it.
func (keyEnds) read(s state) (blockEnd, gapEnd int64) { return s.a, s.b }

// state is the state of blockEnd and gapEnd.
func (keyEnds) state(blockEnd, gapEnd int64) state { return state{a: blockEnd, b: gapEnd} }

// decideKeyInto is decideInto (decideUpToInto for ls.upTo) under the rules
// a key keeps beside its limits' counts, in the state after its limits'
// (keyEnds): ls.block, and ls.gap, the least time between two admitted
// takes.
//
//   - A key whose block has not ended is rejected whatever its counts: each
//     limit answers as a take of 0 would, with nothing Remaining and
//     RetryAfter the block's rest.
//   - A take of a cost above 0 before the gap since the last admitted one
//     has passed is rejected in the same way, for the gap's rest.
//   - A take the limits reject, one that could be admitted later (and one
//     rejected for the gap), blocks the key until now + ls.block.
//   - An admitted take of a cost above 0 starts the gap.
//
// An end further ahead than a block or a gap lasts (another setting, or a
// clock that went back) holds the key no longer than they would. It
// reports whether the ends changed. The Lua twins do the same.
func (a Algorithm) decideKeyInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) (changed bool) {
	// A rejected take keeps its limits' states as they were read, and not
	// as its decision read them (plausible): a block it starts is written
	// with them, and must not write a count of a larger MaxFunc down to
	// this take's limit. The Lua twins write them as they read them.
	read := *sts
	blockEnd, gapEnd := keyEnds{}.read(sts[ls.n])
	block, gap := a.decideEnds(v, sts, lg, now, ls, cost, blockEnd, gapEnd)
	if !v.Allowed() {
		copy(sts[:ls.n], read[:ls.n])
	}
	if block == blockEnd && gap == gapEnd {
		return false
	}
	sts[ls.n] = keyEnds{}.state(block, gap)
	return true
}

// decideEnds is decideKeyInto on the ends it read, which it returns as the
// decision leaves them.
func (a Algorithm) decideEnds(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64, blockEnd, gapEnd int64) (int64, int64) {
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
	if blocking && blockEnd > now {
		a.rejectAtCostZero(v, sts, lg, now, ls, blockEnd-now)
		return blockEnd, gapEnd
	}
	if spacing && cost > 0 && gapEnd > now {
		a.rejectAtCostZero(v, sts, lg, now, ls, gapEnd-now)
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

// rejectAtCostZero makes v the rejection, for rest more ms, of a take on
// the states sts, which it leaves as they are.
func (a Algorithm) rejectAtCostZero(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, rest int64) {
	probe := *sts
	a.decideInto(v, &probe, lg, now, ls, 0)
	v.block(rest)
}

// block makes v the rejection of a key held off for rest more ms.
func (v *Result) block(rest int64) {
	wait := millis(rest)
	for i := range v.n {
		d := &v.each[i]
		d.Allowed, d.Remaining, d.countedIn = false, 0, 0
		d.RetryAfter = max(d.RetryAfter, wait)
		d.ResetAfter = max(d.ResetAfter, d.RetryAfter)
	}
}
