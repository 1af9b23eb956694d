package quota

import "time"

// maxBlock is the longest Config.BlockFor and Config.MinInterval.
const maxBlock = 365 * 24 * time.Hour

// decideKeyInto is decideInto (decideUpToInto for ls.upTo) under the rules
// a key keeps beside its limits' counts, in the state after its limits'
// (see limits.states): ls.block, whose end is that state's a, and ls.gap,
// the least time between two admitted takes, the end of whose wait is its
// b (0: none).
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
// reports whether the state changed. The Lua twins do the same.
func (a Algorithm) decideKeyInto(v *Result, sts *[maxStates]state, lg *logs, now int64, ls *limits, cost int64) (changed bool) {
	// A rejected take keeps its limits' states as they were read, and not
	// as its decision read them (plausible): a block it starts is written
	// with them, and must not write a count of a larger MaxFunc down to
	// this take's limit. The Lua twins write them as they read them.
	read := *sts
	defer func() {
		if !v.Allowed() {
			copy(sts[:ls.n], read[:ls.n])
		}
	}()
	k := &sts[ls.n]
	// The end of a rule this limiter does not have was set by another
	// version of it (a rolling deploy): not enforced (nor kept: see
	// limits.stored).
	blocking, spacing := ls.block > 0, ls.gap > 0
	if blocking && k.a > now+ls.block {
		k.a, changed = now+ls.block, true
	}
	if spacing && k.b > now+ls.gap {
		k.b, changed = now+ls.gap, true
	}
	if blocking && k.a > now {
		a.rejectAtCostZero(v, sts, lg, now, ls, k.a-now)
		return changed
	}
	if spacing && cost > 0 && k.b > now {
		a.rejectAtCostZero(v, sts, lg, now, ls, k.b-now)
	} else {
		if ls.upTo {
			a.decideUpToInto(v, sts, lg, now, ls, cost)
			cost = v.granted
		} else {
			a.decideInto(v, sts, lg, now, ls, cost)
		}
		if v.Allowed() {
			if cost > 0 && ls.gap > 0 {
				k.b, changed = now+ls.gap, true
			}
			return changed
		}
	}
	if ls.block > 0 && v.RetryAfter() != Never {
		k.a = now + ls.block
		v.block(ls.block)
		return true
	}
	return changed
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
