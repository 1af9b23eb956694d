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
	k := &sts[ls.n]
	if k.a > now+ls.block {
		k.a, changed = now+ls.block, true
	}
	if k.b > now+ls.gap {
		k.b, changed = now+ls.gap, true
	}
	if k.a > now {
		a.rejectAtCostZero(v, sts, lg, now, ls, k.a-now)
		return changed
	}
	if cost > 0 && k.b > now {
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
