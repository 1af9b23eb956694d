package quota

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzRefundUnderAnotherLimit plays takes, each under a limit of its own
// (a MaxFunc), refunds of earlier admitted takes under the limit each was
// taken under, rewards and the passing of time, against one key, and
// checks that no refund or reward leaves more room than the key had
// before it plus its own units, under any of the limits in play, and that
// a take reads every state as a Remaining within [0, limit].
func FuzzRefundUnderAnotherLimit(f *testing.F) {
	f.Add(uint8(0), uint64(1000), []byte{0, 40, 1, 100, 1, 100, 1, 100, 2, 0, 1, 100})
	f.Add(uint8(1), uint64(60), []byte{1, 100, 0, 30, 3, 9, 2, 0, 4, 7, 2, 1})
	f.Add(uint8(2), uint64(5000), []byte{0, 200, 1, 250, 1, 250, 3, 2, 2, 0, 2, 0, 4, 1})
	// A window spent under a large limit, then half the next one: a take
	// under a small limit must not cut the previous window's count down.
	spent := append(bytes.Repeat([]byte{0, 255}, 100), 4, 100, 0, 3, 0, 3)
	f.Add(uint8(1), uint64(1000), spent)
	f.Fuzz(func(t *testing.T, algByte uint8, window uint64, ops []byte) {
		alg := Algorithm(1 + algByte%3)
		w := fuzzSize(window, 5000, 1<<40)
		ruleOf := func(arg byte) rule {
			r := rule{max: 1 + int64(arg), window: w}
			r.burst = r.max
			return r
		}
		type taken struct {
			v    Result
			r    rule
			cost int64
		}
		var held []taken
		var sts [maxStates]state
		now := int64(1_000_000)
		remaining := func(r rule) int64 {
			probe, ls := sts, one(r)
			var v Result
			alg.decideInto(&v, &probe, nil, now, &ls, 0)
			if d := v.each[0]; d.Remaining < 0 || int64(d.Remaining) > capacity(alg, r) {
				t.Fatalf("Remaining %d under %+v", d.Remaining, r)
			}
			return int64(v.each[0].Remaining)
		}
		for step := 0; step < fuzzMaxOps && len(ops) >= 2; step++ {
			op, arg := ops[0]%5, ops[1]
			ops = ops[2:]
			switch op {
			case 0, 1: // a take of 1 + arg%3 under a limit of 1 + arg
				r, ls := ruleOf(arg), one(ruleOf(arg))
				cost := 1 + int64(arg%3)
				probes := []rule{ruleOf(0), ruleOf(255), ruleOf(arg / 2)}
				var before [3]int64
				for i, p := range probes {
					before[i] = remaining(p)
				}
				// As the backends: a take's states are kept when it counted.
				var v Result
				next := sts
				alg.decideInto(&v, &next, nil, now, &ls, cost)
				if v.Allowed() {
					sts = next
					held = append(held, taken{v, r, cost})
				}
				// A take never gives back what a larger limit counted. (The
				// token bucket's debt is read, and kept, as at most the
				// capacity of the rule that takes: see docs/algorithms.md.)
				for i, p := range probes {
					if got := remaining(p); alg != TokenBucket && got > before[i] {
						t.Fatalf("%s: a take of %d under limit %d left %d under limit %d, from %d",
							alg.name(), cost, r.max, got, p.max, before[i])
					}
				}
			case 2, 3: // a refund or a reward, under the limit of a held take
				if len(held) == 0 {
					continue
				}
				k := int(arg) % len(held)
				tk := held[k]
				held = append(held[:k], held[k+1:]...)
				probes := []rule{tk.r, ruleOf(0), ruleOf(255), ruleOf(arg)}
				var before [4]int64
				for i, r := range probes {
					before[i] = remaining(r)
				}
				ls, v := one(tk.r), tk.v
				if op == 3 {
					v.adjust = reward
				}
				alg.adjustAll(&sts, nil, now, &ls, tk.cost, &v)
				for i, r := range probes {
					if got := remaining(r); got > before[i]+tk.cost {
						t.Fatalf("%s: %s of %d (taken under %d) left %d under limit %d, from %d: more than it took",
							alg.name(), []string{"refund", "reward"}[op-2], tk.cost, tk.r.max, got, r.max, before[i])
					}
				}
			default:
				now += int64(arg) * max(1, w/64)
			}
		}
	})
}

// FuzzStoredValues reads any bytes as a Storage value of a key, under one
// or two limits with and without the key's rules (every version of a
// limiter in a rolling deploy reads every other's values), takes from it
// and refunds the take: nothing panics, every Remaining is within
// [0, limit], and a value written back reads as what was written.
func FuzzStoredValues(f *testing.F) {
	var sts [maxStates]state
	sts[0], sts[1] = state{a: 1_000_000, b: 3}, state{a: 1_000_500, b: 1_001_000}
	f.Add(uint8(0), uint8(0), encodeStates(&sts, 2, 2_000_000))
	f.Add(uint8(1), uint8(3), encodeStates(&sts, 1, 2_000_000))
	f.Add(uint8(3), uint8(1), []byte{logVersion, 0, 0, 0, 0, 0, 0x1e, 0x84, 0x80})
	f.Fuzz(func(t *testing.T, algByte, rules uint8, raw []byte) {
		alg := Algorithm(1 + algByte%4)
		ls := limits{n: 1 + int(rules%2)}
		for i := range ls.n {
			ls.r[i] = rule{max: 5 + int64(i), burst: 5 + int64(i), window: 1000 * int64(i+1)}
		}
		if rules&2 != 0 {
			ls.block = 300
		}
		if rules&4 != 0 {
			ls.gap = 20
		}
		now := int64(1_000_700)
		var read [maxStates]state
		var lg *logs
		if alg == SlidingLog {
			lg = newLogs(&ls)
			decodeLogs(raw, now, &ls, &read, lg)
		} else {
			decodeStates(raw, now, ls.n, &read)
		}
		var v Result
		if ls.keyRules() {
			alg.decideKeyInto(&v, &read, lg, now, &ls, 1, 0)
		} else {
			alg.decideInto(&v, &read, lg, now, &ls, 1)
		}
		for i, d := range v.Decisions() {
			if d.Remaining < 0 || int64(d.Remaining) > capacity(alg, ls.r[i]) {
				t.Fatalf("Remaining %d under %+v", d.Remaining, ls.r[i])
			}
		}
		if !v.Allowed() || alg == SlidingLog {
			return
		}
		alg.adjustAll(&read, lg, now, &ls, 1, &v)
		kept := ls.stored(&read, now)
		val := encodeStates(&read, kept, now+10_000)
		var again [maxStates]state
		decodeStates(val, now, ls.n, &again)
		if !slices.Equal(again[:kept], read[:kept]) {
			t.Fatalf("wrote %v, read %v", read[:kept], again[:kept])
		}
	})
}
