package quota

import (
	"fmt"
	"testing"
)

// FuzzAdjustments plays takes, penalties, rewards and takes up to a cost on
// one key of any algorithm and rule (see fuzzRule), and checks each against
// the Remaining a take of 0 reports just before it, at the same instant:
//   - a penalty of c leaves max(0, Remaining-c): it counts what fits and no
//     more than the whole quota;
//   - a reward leaves at least Remaining and at most the capacity, exactly
//     min(capacity, Remaining+c) but for the sliding window (whose previous
//     window weighs less than a unit), and a reward past what is spent
//     leaves the whole capacity;
//   - a take up to c grants min(c, Remaining) and leaves Remaining less
//     that; when nothing is left it grants nothing and is a rejection, of a
//     cost of 1 unless c is 0.
func FuzzAdjustments(f *testing.F) {
	f.Add(uint8(1), uint64(5), uint64(5), uint64(1000), []byte{0, 3, 1, 4, 2, 2, 3, 9, 4, 200, 1, 40, 2, 255, 3, 0})
	f.Add(uint8(2), uint64(3), uint64(3), uint64(100), []byte{0, 3, 4, 150, 2, 1, 3, 5, 1, 2, 4, 60, 2, 1})
	f.Add(uint8(3), uint64(4), uint64(9), uint64(60), []byte{1, 12, 4, 7, 3, 20, 2, 3, 3, 2})
	f.Fuzz(func(t *testing.T, algByte uint8, limit, burst, window uint64, ops []byte) {
		alg := Algorithm(1 + algByte%3)
		r := fuzzRule(alg, limit, burst, window)
		ls := one(r)
		capacity := r.burst
		var sts [maxStates]state
		now := int64(0)
		remaining := func() int64 {
			probe := sts
			var v Result
			alg.decideInto(&v, &probe, nil, now, &ls, 0)
			return int64(v.each[0].Remaining)
		}
		for step := 0; step < fuzzMaxOps && len(ops) >= 2; step++ {
			op, arg := ops[0]%5, int64(ops[1])
			ops = ops[2:]
			cost := arg % (capacity + 3)
			if arg >= 250 {
				cost = hugeCost(capacity, arg)
			}
			before := remaining()
			where := func() string {
				return fmt.Sprintf("%s %+v, op %d (%d) of cost %d at %d ms, Remaining before %d", alg.name(), r, step, op, cost, now, before)
			}
			switch op {
			case 0:
				var v Result
				alg.decideInto(&v, &sts, nil, now, &ls, cost)
			case 1:
				sts[0] = alg.adjust(penalty, sts[0], now, r, cost, Decision{})
				if got, want := remaining(), max(0, before-cost); got != want {
					t.Fatalf("penalty left %d, want %d: %s", got, want, where())
				}
			case 2:
				sts[0] = alg.adjust(reward, sts[0], now, r, cost, Decision{})
				got := remaining()
				if got < before || got > capacity {
					t.Fatalf("reward left %d: %s", got, where())
				}
				if want := min(capacity, before+min(cost, capacity)); alg != SlidingWindow && got != want {
					t.Fatalf("reward left %d, want %d: %s", got, want, where())
				}
				if cost >= 2*capacity && got != capacity {
					t.Fatalf("a reward of everything left %d: %s", got, where())
				}
			case 3:
				var v Result
				alg.decideUpToInto(&v, &sts, nil, now, &ls, cost)
				want := min(cost, before)
				if v.granted != want || v.Allowed() != (want > 0 || cost == 0) {
					t.Fatalf("granted %d (allowed %v), want %d: %s", v.granted, v.Allowed(), want, where())
				}
				if got := remaining(); got != before-want {
					t.Fatalf("a take up to %d left %d, want %d: %s", cost, got, before-want, where())
				}
			default:
				now = min(now+arg*max(1, r.window/64), fuzzMaxNow)
			}
		}
	})
}

// FuzzMinInterval plays takes and waits on one key of any algorithm, rule,
// MinInterval and BlockFor (each up to a few windows), and checks that no
// two admitted takes of a cost are closer than MinInterval, that a take
// rejected for the gap or a block counts nothing, and that a block holds
// every take off until it ends.
func FuzzMinInterval(f *testing.F) {
	f.Add(uint8(1), uint64(5), uint64(5), uint64(1000), uint16(200), uint16(0), []byte{0, 1, 1, 50, 0, 1, 1, 200, 0, 2})
	f.Add(uint8(2), uint64(3), uint64(3), uint64(100), uint16(30), uint16(500), []byte{0, 3, 0, 1, 1, 10, 0, 1, 1, 255, 1, 255, 0, 1})
	f.Add(uint8(3), uint64(4), uint64(9), uint64(60), uint16(7), uint16(90), []byte{0, 2, 1, 3, 0, 2, 1, 9, 0, 4})
	f.Fuzz(func(t *testing.T, algByte uint8, limit, burst, window uint64, gap, block uint16, ops []byte) {
		alg := Algorithm(1 + algByte%3)
		r := fuzzRule(alg, limit, burst, window)
		ls := one(r)
		ls.gap, ls.block = int64(gap), int64(block)
		if !ls.keyRules() {
			return
		}
		var sts [maxStates]state
		now, last, blockedUntil := int64(0), int64(-1), int64(0)
		for step := 0; step < fuzzMaxOps && len(ops) >= 2; step++ {
			op, arg := ops[0]%2, int64(ops[1])
			ops = ops[2:]
			if op == 1 {
				now = min(now+arg, fuzzMaxNow)
				continue
			}
			cost := arg % (r.burst + 2)
			before := sts
			var v Result
			alg.decideKeyInto(&v, &sts, nil, now, &ls, cost, 0)
			switch {
			case v.Allowed() && cost > 0:
				if last >= 0 && now-last < ls.gap {
					t.Fatalf("%s %+v gap %d: admitted at %d, %d ms after the last", alg.name(), r, ls.gap, now, now-last)
				}
				if now < blockedUntil {
					t.Fatalf("%s %+v block %d: admitted at %d, blocked until %d", alg.name(), r, ls.block, now, blockedUntil)
				}
				last = now
			case !v.Allowed():
				for i := range ls.n {
					if sts[i] != before[i] {
						t.Fatalf("%s %+v: a rejected take at %d changed the counts", alg.name(), r, now)
					}
				}
				if ls.block > 0 && v.RetryAfter() != Never && now >= blockedUntil { // a block is not drawn out by the takes it rejects
					blockedUntil = now + ls.block
				}
			}
		}
	})
}
