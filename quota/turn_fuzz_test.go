package quota

import (
	"context"
	"slices"
	"testing"
)

// FuzzTurns drives one key with takes that may wait for their turn, and
// turns given back before they come, on the in-memory manager, for every
// algorithm; then it checks the turns as they run (the decision's time
// plus its wait) against what the algorithm admits at those times:
//
//   - the token bucket: the units run within any [a, b] are at most
//     Burst + (b - a) x Max / window, plus 1 for the rounding of steps;
//   - the log: at most Max units run within any window (t - window, t];
//   - the fixed and sliding windows: at most 2 x Max within any window
//     (their own bound across an edge; the exact rules are the
//     differential tests' to check against Redis).
//
// And every admitted take waited at most its delay.
func FuzzTurns(f *testing.F) {
	f.Add(uint8(3), uint8(0), uint16(200), uint8(2), []byte{0, 10, 20, 30, 40, 50, 60, 200, 1, 0, 5})
	f.Add(uint8(1), uint8(2), uint16(100), uint8(1), []byte{9, 9, 9, 9, 9, 9, 9, 9, 7, 7, 7, 255, 3})
	f.Add(uint8(5), uint8(1), uint16(1000), uint8(4), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add(uint8(2), uint8(3), uint16(50), uint8(3), []byte{0, 0, 0, 0, 128, 128, 0, 0, 200, 200})
	f.Fuzz(func(t *testing.T, max, alg uint8, window uint16, burst uint8, ops []byte) {
		if max == 0 || window == 0 || len(ops) > 400 {
			return
		}
		a := allAlgorithms[int(alg)%len(allAlgorithms)]
		r := rule{max: int64(max%16 + 1), window: int64(window%2000 + 1)}
		r.burst = r.max
		if a == TokenBucket {
			r.burst = int64(burst%16 + 1)
		}
		ls := one(r)
		var now int64 = 1_700_000_000_000
		m := testManager(a, ls, 16, func() int64 { return now })
		ctx := context.Background()
		type run struct {
			at, cost int64
			v        Result
		}
		var runs []run
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], int64(ops[i+1])
			switch op % 4 {
			case 0: // time passes
				now += arg * 3
			case 3: // a turn not come yet (the arg-th of them) is given back
				var ahead []int
				for j := range runs {
					if runs[j].at > now {
						ahead = append(ahead, j)
					}
				}
				if len(ahead) == 0 {
					continue
				}
				j := ahead[int(arg)%len(ahead)]
				if _, err := m.adjust(ctx, "k", &ls, runs[j].cost, &runs[j].v); err != nil {
					t.Fatal(err)
				}
				runs = slices.Delete(runs, j, j+1)
			default: // a take that may wait
				turn := ls
				turn.turn, turn.delay = true, arg*8
				cost := int64(op/4%3) + 1
				v, err := m.take(ctx, "k", &turn, cost)
				if err != nil {
					t.Fatal(err)
				}
				if !v.Allowed() {
					continue
				}
				if v.wait < 0 || v.wait > turn.delay {
					t.Fatalf("waited %d ms of %d", v.wait, turn.delay)
				}
				v.adjust = refundTaken
				runs = append(runs, run{at: now + v.wait, cost: cost, v: v})
			}
		}
		slices.SortFunc(runs, func(x, y run) int { return int(x.at - y.at) })
		for i := range runs {
			units := int64(0)
			for j := i; j < len(runs); j++ {
				units += runs[j].cost
				span := runs[j].at - runs[i].at
				switch a {
				case TokenBucket:
					if units*r.window > r.burst*r.window+span*r.max+r.window {
						t.Fatalf("%d units ran within %d ms; the bucket (%d, %d per %d ms) holds %d", units, span, r.burst, r.max, r.window, r.burst+span*r.max/r.window+1)
					}
				case SlidingLog:
					if span < r.window && units > r.max {
						t.Fatalf("%d units ran within %d ms; the log admits %d per %d ms", units, span, r.max, r.window)
					}
				default:
					if span < r.window && units > 2*r.max {
						t.Fatalf("%d units ran within %d ms; the window admits %d per %d ms", units, span, r.max, r.window)
					}
				}
			}
		}
	})
}
