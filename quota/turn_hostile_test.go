package quota

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ranTake is an admitted take with a turn as it runs: its turn lies in
// [lo, hi] (ms on the store's clock; lo == hi on a clock the test holds),
// and each limit counted its cost where counted says (ms).
type ranTake struct {
	lo, hi, cost int64
	counted      [maxLimits]int64
}

// heldTurn is a Reservation whose turn may still be given back.
type heldTurn struct {
	r   *Reservation
	key string
	at  int64 // its turn, ms on the limiter's clock
	idx int   // its place in runs[key]
}

// checkRuns reports the first way runs (one key's admitted takes, given
// back ones left out) certainly exceed what limit i (rule r, Limit lim)
// of alg admits, judged at the times they run, or "".
func checkRuns(alg Algorithm, r rule, i int, lim Limit, runs []ranTake) string {
	var rs []ranTake
	for _, x := range runs {
		if x.cost > 0 {
			rs = append(rs, x)
		}
	}
	slices.SortStableFunc(rs, func(a, b ranTake) int { return int(a.lo - b.lo) })
	// W is the window as the rule keeps it; step, the rule's time step
	// (ms), which a quota too large for ms has above 1: times round down
	// to it, so a bucket may admit one step's refill more.
	step := r.stepMillis()
	W, max := r.window*step, int64(lim.Max)
	switch alg {
	case FixedWindow:
		sums := map[int64]int64{}
		for _, x := range rs {
			s := x.counted[i]
			if x.hi < s || x.lo >= s+W {
				return fmt.Sprintf("a take running in [%d, %d] is counted in the window from %d", x.lo, x.hi, s)
			}
			sums[s] += x.cost
			if sums[s] > max {
				return fmt.Sprintf("the window from %d runs %d > %d", s, sums[s], max)
			}
		}
		starts := make([]int64, 0, len(sums))
		for s := range sums {
			starts = append(starts, s)
		}
		slices.Sort(starts)
		for j := 1; j < len(starts); j++ {
			if starts[j]-starts[j-1] < W {
				return fmt.Sprintf("windows from %d and %d overlap", starts[j-1], starts[j])
			}
		}
	case SlidingLog:
		// The log's entry is the turn itself, on the store's clock.
		for _, x := range rs {
			if at := x.counted[i]; at < x.lo-step || at > x.hi {
				return fmt.Sprintf("a take running in [%d, %d] is logged at %d", x.lo, x.hi, at)
			}
		}
		slices.SortStableFunc(rs, func(a, b ranTake) int { return int(a.counted[i] - b.counted[i]) })
		for a := range rs {
			sum := int64(0)
			for b := a; b < len(rs) && rs[b].counted[i] < rs[a].counted[i]+W; b++ {
				sum += rs[b].cost
			}
			if sum > max {
				return fmt.Sprintf("%d run within %d ms from %d, > %d", sum, W, rs[a].counted[i], max)
			}
		}
	case TokenBucket:
		burst := int64(lim.Burst)
		if burst == 0 {
			burst = max
		}
		for a := range rs {
			for b := range rs {
				A, B := rs[a].lo, rs[b].hi
				if B < A {
					continue
				}
				sum := int64(0)
				for _, x := range rs {
					if x.lo >= A && x.hi <= B {
						sum += x.cost
					}
				}
				if bound := burst + mulDiv(max, B-A+step-1, W) + 1; sum > bound {
					return fmt.Sprintf("%d run in [%d, %d], > %d", sum, A, B, bound)
				}
			}
		}
	case SlidingWindow:
		totals := map[int64]int64{}
		for _, x := range rs {
			totals[x.counted[i]] += x.cost
		}
		for _, x := range rs {
			s := x.counted[i]
			if x.hi < s || x.lo >= s+W {
				return fmt.Sprintf("a take running in [%d, %d] is counted in the window from %d", x.lo, x.hi, s)
			}
			// Its window's count at its run: its own cost and the costs
			// of the runs certainly not after it.
			c := int64(0)
			for _, y := range rs {
				if y.counted[i] == s && y.hi <= x.lo {
					c += y.cost
				}
			}
			if x.hi > x.lo || c == 0 {
				c += x.cost // not counted above
			}
			prev := totals[s-W]
			elapsed := min(W, x.hi-s)
			est := new(big.Int).Mul(big.NewInt(prev), big.NewInt(W-elapsed))
			est.Add(est, new(big.Int).Mul(big.NewInt(c), big.NewInt(W)))
			if est.Cmp(new(big.Int).Mul(big.NewInt(max), big.NewInt(W))) > 0 {
				return fmt.Sprintf("at %d the estimate is %v/%d (prev %d, cur %d, window from %d), > %d", x.hi, est, W, prev, c, s, max)
			}
		}
	}
	return ""
}

// mulDiv is a*b/c without overflow (c > 0, the quotient fits).
func mulDiv(a, b, c int64) int64 {
	p := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	return p.Quo(p, big.NewInt(c)).Int64()
}

// turnTrace drives a random trace of Reserve and Cancel through ls (one
// Limiter in memory, or replicas on Redis) on a frozen clock, and checks
// after every step that the turns, judged at the times they run, never
// exceed any limit, that no wait exceeds its maxDelay and that a
// rejection's RetryAfter is not negative.
func turnTrace(t *testing.T, alg Algorithm, limits []Limit, ls []*Limiter, clock *frozenClock, prefix string, seed uint64, steps int) (admitted, waited, rejected, given int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 77))
	base := clock.ms.Load()
	runs := map[string][]ranTake{}
	live := map[string][]bool{}
	var held []heldTurn
	var hist []string
	shortest, least := limits[0].Expiration, limits[0].Max
	for _, lim := range limits {
		shortest, least = min(shortest, lim.Expiration), min(least, lim.Max)
	}
	longest := ls[0].longestDelay
	check := func(step int, what string) {
		t.Helper()
		for key, rs := range runs {
			var kept []ranTake
			for j, x := range rs {
				if live[key][j] {
					kept = append(kept, x)
				}
			}
			for i, lim := range limits {
				if msg := checkRuns(alg, ls[0].base.r[i], i, lim, kept); msg != "" {
					for _, x := range kept {
						t.Logf("  run at %d cost %d counted %v", x.lo-base, x.cost, x.counted[:len(limits)])
					}
					require.Failf(t, "over-admission", "step %d (%s), key %s, limit %d %+v: %s", step, what, key, i, lim, msg)
				}
			}
		}
	}
	for step := range steps {
		now := clock.ms.Load()
		// Turns that have come leave the waiting places.
		held = slices.DeleteFunc(held, func(h heldTurn) bool {
			if h.at <= now {
				h.r.release()
				return true
			}
			return false
		})
		switch op := rng.IntN(10); {
		case op < 2:
			switch rng.IntN(6) {
			case 0:
				clock.add(time.Duration(rng.Int64N(int64(shortest)*3 + 1)))
				hist = append(hist, fmt.Sprintf("clock to %d", clock.ms.Load()-base))
			default:
				clock.add(time.Duration(rng.Int64N(int64(shortest)/4 + 1)).Truncate(time.Millisecond))
				hist = append(hist, fmt.Sprintf("clock to %d", clock.ms.Load()-base))
			}
		case op < 4 && len(held) > 0:
			j := rng.IntN(len(held))
			if rng.IntN(2) == 0 {
				j = len(held) - 1 // the latest turn, more often
			}
			h := held[j]
			held = slices.Delete(held, j, j+1)
			h.r.Cancel(ctx)
			hist = append(hist, fmt.Sprintf("at %d: cancel %s turn at %d -> given back %v", now-base, h.key[len(prefix):], h.at-base, !h.r.Allowed()))
			if !h.r.Allowed() {
				live[h.key][h.idx] = false
				given++
			}
			if step%50 == 0 {
				check(step, fmt.Sprintf("cancel of %s's turn at %d", h.key, h.at-base))
			}
		default:
			key := prefix + "k" + strconv.Itoa(rng.IntN(2))
			cost := rng.IntN(4)
			if least > 100 {
				cost = []int{0, 1, least / 3, least / 2, least, least + 1}[rng.IntN(6)]
			}
			var delay time.Duration
			switch rng.IntN(4) {
			case 0:
			case 1:
				delay = longest
			default:
				delay = time.Duration(rng.Int64N(int64(min(longest, 3*shortest)))).Truncate(time.Millisecond)
			}
			l := ls[rng.IntN(len(ls))]
			r, err := l.Reserve(ctx, key, cost, delay)
			require.NoError(t, err)
			hist = append(hist, fmt.Sprintf("at %d: replica %d reserve %s cost %d delay %v -> allowed %v wait %v retry %v", now-base, slices.Index(ls, l), key[len(prefix):], cost, delay, r.Allowed(), r.Delay(), r.RetryAfter()))
			require.GreaterOrEqual(t, r.Delay(), time.Duration(0))
			require.LessOrEqual(t, r.Delay(), delay, "step %d: the wait is within maxDelay", step)
			if !r.Allowed() {
				rejected++
				require.Zero(t, r.Delay())
				for _, d := range r.Decisions() {
					require.GreaterOrEqual(t, d.RetryAfter, time.Duration(0), "step %d: RetryAfter", step)
				}
				if cost <= least && r.RetryAfter() != Never {
					assert.Positive(t, r.RetryAfter(), "step %d: a rejected take (cost %d, delay %v) says when", step, cost, delay)
					if r.Source() != SourceDenyCache && rng.IntN(3) == 0 {
						// Back after the store's RetryAfter, at the same replica
						// (whose deny cache holds this rejection alone), it is
						// admitted without waiting.
						clock.add(r.RetryAfter())
						li := slices.Index(ls, l)
						again, err := ls[li].Reserve(ctx, key, cost, 0)
						require.NoError(t, err)
						hist = append(hist, fmt.Sprintf("at %d: replica %d reserve %s cost %d delay 0 -> allowed %v wait %v retry %v", clock.ms.Load()-base, li, key[len(prefix):], cost, again.Allowed(), again.Delay(), again.RetryAfter()))
						if !again.Allowed() {
							for _, h := range hist[max(0, len(hist)-30):] {
								t.Log(h)
							}
						}
						require.True(t, again.Allowed(), "step %d: cost %d back after RetryAfter %v (delay %v) at %d ms", step, cost, r.RetryAfter(), delay, clock.ms.Load()-base)
						at := clock.ms.Load()
						x := ranTake{lo: at, hi: at, cost: int64(cost)}
						for i := range limits {
							x.counted[i] = again.each[i].countedIn * ls[0].base.r[i].stepMillis()
						}
						runs[key] = append(runs[key], x)
						live[key] = append(live[key], true)
						if step%50 == 0 {
							check(step, "a take back after RetryAfter")
						}
					}
				}
				continue
			}
			admitted++
			at := now + r.Delay().Milliseconds()
			x := ranTake{lo: at, hi: at, cost: int64(cost)}
			for i := range limits {
				x.counted[i] = r.each[i].countedIn * ls[0].base.r[i].stepMillis()
			}
			runs[key] = append(runs[key], x)
			live[key] = append(live[key], true)
			if r.Delay() > 0 {
				waited++
				held = append(held, heldTurn{r: r, key: key, at: at, idx: len(runs[key]) - 1})
			}
			if step%50 == 0 {
				check(step, fmt.Sprintf("reserve of %s cost %d delay %v: wait %v", key, cost, delay, r.Delay()))
			}
			require.LessOrEqual(t, l.waiting.Load(), l.maxWaiting, "step %d: the waiters", step)
		}
	}
	check(steps, "the end: every turn given back has been, the rest have run or will")
	for _, h := range held {
		h.r.release()
	}
	return admitted, waited, rejected, given
}

// redTeamLimits are the limit sets the random traces run under.
var redTeamLimits = []struct {
	name   string
	limits []Limit
}{
	{"one", []Limit{{Max: 3, Expiration: 200 * time.Millisecond}}},
	{"burst below", []Limit{{Max: 5, Expiration: 500 * time.Millisecond, Burst: 2}}},
	{"burst above", []Limit{{Max: 2, Expiration: 300 * time.Millisecond, Burst: 5}}},
	{"two", []Limit{{Max: 2, Expiration: 100 * time.Millisecond}, {Max: 5, Expiration: time.Second}}},
	{"three", []Limit{{Max: 3, Expiration: 150 * time.Millisecond, Burst: 1}, {Max: 4, Expiration: 700 * time.Millisecond}, {Max: 6, Expiration: 2 * time.Second, Burst: 9}}},
	{"huge month", []Limit{{Max: math.MaxUint32, Expiration: 30 * 24 * time.Hour}}},
	{"huge fast and slow", []Limit{{Max: math.MaxUint32, Expiration: 100 * time.Millisecond}, {Max: 1 << 31, Expiration: 90 * time.Second, Burst: math.MaxUint32}}},
	{"big log", []Limit{{Max: MaxLogLimit - 1000, Expiration: 30 * 24 * time.Hour}, {Max: 1000, Expiration: time.Second, Burst: 3000}}},
}

// Takes with turns never exceed any limit at the times they run: random
// traces of Reserve (costs 0 to 3, waits 0 to the longest allowed) and
// Cancel (of the latest turn and of any other) on every algorithm, under
// one to three limits, in memory and across three Redis replicas on one
// frozen client clock.
func TestTurnsNeverExceedTheLimits(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, c := range redTeamLimits {
			if alg == SlidingLog && c.limits[0].Max > MaxLogLimit {
				continue // a log of 2^32 entries is refused at New
			}
			limits := slices.Clone(c.limits)
			if alg != TokenBucket {
				for i := range limits {
					limits[i].Burst = 0
				}
			}
			for _, where := range []struct {
				name   string
				server *redistest.Server
			}{{"memory", nil}, {"redis", server}} {
				t.Run(alg.name()+"/"+c.name+"/"+where.name, func(t *testing.T) {
					for seed := range uint64(3) {
						clock := newFrozenClock()
						cfg := Config{Algorithm: alg, Limits: limits, Now: clock.Now, MaxWaiting: 1 << 20}
						if seed == 2 {
							cfg.MaxWaiting = 2 // beyond it, takes that may not wait
						}
						ls := turnReplicas(t, where.server, 3, cfg)
						prefix := fmt.Sprintf("%s/%d/", t.Name(), seed)
						a, w, r, g := turnTrace(t, alg, limits, ls, clock, prefix, seed*1000+uint64(alg), 300)
						t.Logf("seed %d: %d admitted (%d later), %d rejected, %d given back", seed, a, w, r, g)
						if c.limits[0].Max < 100 {
							assert.Positive(t, w)
						}
					}
				})
			}
		}
	}
}

// Takes with turns never exceed the limits at the times they run when
// the store keeps the time (Redis's TIME; the process's clock in
// memory), with six goroutines on three Redis replicas taking, waiting
// up to 400 ms and giving turns back at once: each run's turn is known
// within the store time read before and after its decision, and only
// certain excesses count.
func TestTurnsOnTheStoresClock(t *testing.T) {
	server := redistest.Start(t)
	timeOf := func(c interface {
		Time(ctx context.Context) *goredis.TimeCmd
	}, ceil bool) int64 {
		at, err := c.Time(context.Background()).Result()
		require.NoError(t, err)
		us := at.UnixMicro()
		if ceil {
			return (us + 999) / 1000
		}
		return us / 1000
	}
	for _, alg := range allAlgorithms {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(alg.name()+"/"+where.name, func(t *testing.T) {
				limits := []Limit{{Max: 2, Expiration: 100 * time.Millisecond}, {Max: 5, Expiration: time.Second}}
				if alg == TokenBucket {
					limits[0].Burst, limits[1].Burst = 1, 7
				}
				ls := turnReplicas(t, where.server, 3, Config{Algorithm: alg, Limits: limits, MaxWaiting: 1 << 20})
				now := func(ceil bool) int64 {
					if where.server == nil {
						ms := int64(time.Since(ls[0].memory.origin) / time.Millisecond)
						if ceil {
							ms++
						}
						return ms
					}
					return timeOf(server.Client(t), ceil)
				}
				prefix := t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
				var mu sync.Mutex
				runs := map[string][]ranTake{}
				live := map[string][]bool{}
				var admitted, waited, given atomic.Int64
				var wg sync.WaitGroup
				for g := range 6 {
					wg.Go(func() {
						ctx := context.Background()
						rng := rand.New(rand.NewPCG(uint64(g), uint64(alg)))
						type mine struct {
							r   *Reservation
							key string
							idx int
						}
						var held []mine
						for range 40 {
							if len(held) > 0 && rng.IntN(4) == 0 {
								j := len(held) - 1
								if rng.IntN(2) == 0 {
									j = rng.IntN(len(held))
								}
								h := held[j]
								held = slices.Delete(held, j, j+1)
								h.r.Cancel(ctx)
								if !h.r.Allowed() {
									mu.Lock()
									live[h.key][h.idx] = false
									mu.Unlock()
									given.Add(1)
								}
								continue
							}
							key := prefix + "k" + strconv.Itoa(rng.IntN(2))
							cost := rng.IntN(4)
							delay := time.Duration(rng.IntN(400)) * time.Millisecond
							lo := now(false)
							r, err := ls[rng.IntN(len(ls))].Reserve(ctx, key, cost, delay)
							hi := now(true)
							if !assert.NoError(t, err) {
								return
							}
							assert.LessOrEqual(t, r.Delay(), delay)
							if r.Allowed() {
								admitted.Add(1)
								d := r.Delay().Milliseconds()
								x := ranTake{lo: lo + d, hi: hi + d, cost: int64(cost)}
								for i := range limits {
									x.counted[i] = r.each[i].countedIn * ls[0].base.r[i].stepMillis()
								}
								mu.Lock()
								runs[key] = append(runs[key], x)
								live[key] = append(live[key], true)
								idx := len(runs[key]) - 1
								mu.Unlock()
								if d > 0 {
									waited.Add(1)
									held = append(held, mine{r, key, idx})
								}
							}
							time.Sleep(time.Duration(rng.IntN(12)) * time.Millisecond)
						}
						for _, h := range held {
							h.r.release()
						}
					})
				}
				wg.Wait()
				for key, rs := range runs {
					var kept []ranTake
					for j, x := range rs {
						if live[key][j] {
							kept = append(kept, x)
						}
					}
					for i, lim := range limits {
						if msg := checkRuns(alg, ls[0].base.r[i], i, lim, kept); msg != "" {
							t.Errorf("key %s, limit %d %+v: %s", key, i, lim, msg)
						}
					}
				}
				t.Logf("%d admitted, %d later, %d given back", admitted.Load(), waited.Load(), given.Load())
				assert.Positive(t, waited.Load())
			})
		}
	}
}

// A waiter that gives back the latest turn of its key hands it to the
// next take, in memory and on Redis: 1 a second, a take now, a turn at 1 s
// given back, and the next take's turn is at 1 s again (2 s for the
// sliding window, whose estimate is below 1 there). Not the log's: it
// keeps the key's clock in its newest entry, which it therefore keeps (a
// turn later; see docs/waiting.md).
func TestTheLatestTurnGivenBackGoesToTheNext(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(alg.name()+"/"+where.name, func(t *testing.T) {
				ctx := context.Background()
				clock := newFrozenClock()
				ls := turnReplicas(t, where.server, 2, Config{Algorithm: alg, Limits: []Limit{PerSecond(1)}, Now: clock.Now})
				key := t.Name()
				first, err := ls[0].Reserve(ctx, key, 1, 3*time.Second)
				require.NoError(t, err)
				require.True(t, first.Allowed())
				require.Zero(t, first.Delay())
				turn, err := ls[len(ls)-1].Reserve(ctx, key, 1, 3*time.Second)
				require.NoError(t, err)
				require.True(t, turn.Allowed())
				require.Positive(t, turn.Delay())
				clock.add(100 * time.Millisecond) // the waiter waits a while, then its request ends
				turn.Cancel(ctx)
				require.False(t, turn.Allowed())
				next, err := ls[0].Reserve(ctx, key, 1, 3*time.Second)
				require.NoError(t, err)
				require.True(t, next.Allowed())
				want := turn.Delay() - 100*time.Millisecond
				if alg == SlidingLog {
					want += time.Second // lost: the next turn after it
				}
				assert.Equal(t, want, next.Delay(), "the turn given back is the next take's")
				next.Cancel(ctx)
			})
		}
	}
}

// A key whose turns lie far ahead of its window outlives the window: 1
// per 100 ms on the store's own clock (Redis's TIME, the process's in
// memory), ten turns up to 900 ms ahead, then 300 ms of quiet: the next
// take's turn still comes after the last one, on every algorithm.
func TestTurnsAheadOutliveTheirWindow(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(alg.name()+"/"+where.name, func(t *testing.T) {
				ctx := context.Background()
				ls := turnReplicas(t, where.server, 2, Config{Algorithm: alg, Limits: []Limit{{Max: 1, Expiration: 100 * time.Millisecond}}})
				key := t.Name()
				start := time.Now()
				var last time.Duration // the latest turn, from start, at the earliest
				for i := range 10 {
					before := time.Since(start)
					r, err := ls[i%len(ls)].Reserve(ctx, key, 1, 2*time.Second)
					require.NoError(t, err)
					require.True(t, r.Allowed())
					defer r.Cancel(ctx)
					last = max(last, before+r.Delay())
				}
				require.GreaterOrEqual(t, last, 500*time.Millisecond, "ten turns of 1 per 100 ms")
				time.Sleep(300 * time.Millisecond)
				r, err := ls[0].Reserve(ctx, key, 1, 2*time.Second)
				elapsed := time.Since(start)
				require.NoError(t, err)
				defer r.Cancel(ctx)
				// The next turn is no sooner than the last turn: from start,
				// at elapsed + Delay >= last (ms of rounding aside).
				assert.GreaterOrEqual(t, elapsed+r.Delay()+2*time.Millisecond, last, "a turn within the turns already given (delay %v after %v)", r.Delay(), elapsed)
			})
		}
	}
}

// A hostile trace of takes with turns gives the same verdicts, waits and
// states from the in-memory manager and from Redis with the client clock:
// waits up to the longest a turn may lie ahead (a minute over a 100 ms
// window), costs up to one above the burst, jumps of many windows, turns
// given back before and after they came, quotas of 2^32-1 in steps above
// a ms, Burst below and above Max.
func TestHostileTurnsMatchMemory(t *testing.T) {
	server := redistest.Start(t)
	day := 24 * time.Hour
	cases := []struct {
		name  string
		rules func(alg Algorithm) []rule
	}{
		{"fast and slow", func(alg Algorithm) []rule {
			return []rule{newRule(3, 3, 100*time.Millisecond, 1000), newRule(1000, 1000, time.Hour, 1000)}
		}},
		{"bursts", func(alg Algorithm) []rule {
			if alg != TokenBucket {
				return []rule{newRule(4, 4, 250*time.Millisecond, 4), newRule(6, 6, 2*time.Second, 6)}
			}
			return []rule{newRule(4, 1, 250*time.Millisecond, 4), newRule(6, 17, 2*time.Second, 17)}
		}},
		{"huge", func(alg Algorithm) []rule {
			if alg == SlidingLog {
				return []rule{newRule(5000, 5000, 30*day, 5000), newRule(3, 3, 100*time.Millisecond, 5000)}
			}
			return []rule{newRule(math.MaxUint32, math.MaxUint32, 30*day, math.MaxUint32), newRule(7, 7, 100*time.Millisecond, math.MaxUint32)}
		}},
	}
	for _, alg := range allAlgorithms {
		for _, c := range cases {
			t.Run(alg.name()+"/"+c.name, func(t *testing.T) {
				rules := c.rules(alg)
				ls := limits{n: len(rules)}
				copy(ls.r[:], rules)
				longest := longestDelayOf(&ls).Milliseconds()
				const base = int64(1_700_000_000_000)
				clock := newTraceClock(base)
				mem := testManager(alg, ls, 1<<20, clock.millis)
				red := newRedisBackend(server.Client(t), nil, alg, "turns-hostile:"+alg.name()+":"+c.name+":", &Config{clock: clock.millis})
				rng := rand.New(rand.NewPCG(99, uint64(alg)))
				type taken struct {
					v    Result
					cost int64
				}
				held := map[string][]taken{}
				var now, waited, rejected, cancels int
				ctx := context.Background()
				for step := range 1200 {
					switch rng.IntN(8) {
					case 0:
						clock.step(rng.Int64N(300))
					case 1:
						clock.step(rng.Int64N(5 * rules[0].window * rules[0].stepMillis()))
					}
					key := "k" + strconv.Itoa(rng.IntN(3))
					if h := held[key]; len(h) > 0 && rng.IntN(4) == 0 {
						j := len(h) - 1
						if rng.IntN(2) == 0 {
							j = rng.IntN(len(h))
						}
						want, err := mem.adjust(ctx, key, &ls, h[j].cost, &h[j].v)
						require.NoError(t, err)
						got, err := red.adjust(ctx, key, &ls, h[j].cost, &h[j].v)
						require.NoError(t, err)
						require.Equal(t, want, got, "step %d: the state giving back a turn of key %s leaves", step, key)
						held[key] = slices.Delete(h, j, j+1)
						cancels++
						continue
					}
					least := min(rules[0].burst, rules[1].burst)
					cost := []int64{0, 1, 2, least / 2, least, least + 1}[rng.IntN(6)]
					turn := ls
					turn.turn = true
					switch rng.IntN(4) {
					case 0:
						turn.delay = longest
					case 1:
						turn.delay = 0
					default:
						turn.delay = rng.Int64N(longest + 1)
					}
					want, err := mem.take(ctx, key, &turn, cost)
					require.NoError(t, err)
					got, err := red.take(ctx, key, &turn, cost)
					require.NoError(t, err)
					require.Equal(t, want, got, "step %d: key %s cost %d delay %d at %d ms", step, key, cost, turn.delay, clock.millis()-base)
					require.LessOrEqual(t, want.wait, turn.delay)
					switch {
					case !want.Allowed():
						rejected++
					case want.wait > 0:
						waited++
					default:
						now++
					}
					if want.Allowed() && cost > 0 {
						held[key] = append(held[key], taken{want, cost})
					}
				}
				t.Logf("%d admitted now, %d at a later turn, %d rejected, %d turns given back", now, waited, rejected, cancels)
				assert.Positive(t, waited)
				assert.Positive(t, rejected)
			})
		}
	}
}

// Two waiters that give back the latest two turns of their key, the
// latest first: the token bucket hands the earlier turn to the next take,
// as x/time/rate does (once the latest is given back, no later turn counts
// on the earlier one, and the bucket's clock moves back). A window keeps
// the latest window alone, so the earlier turn's window is gone: the next
// take has the later turn (the windows), or the one after it (the log,
// which keeps its newest entry); never one sooner than the bucket's. 1 a
// second, a take now, turns at 1 s and 2 s given back, the 2 s one first.
func TestTheLatestTurnsGivenBackGoToTheNext(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(alg.name()+"/"+where.name, func(t *testing.T) {
				ctx := context.Background()
				clock := newFrozenClock()
				ls := turnReplicas(t, where.server, 2, Config{Algorithm: alg, Limits: []Limit{PerSecond(1)}, Now: clock.Now})
				key := t.Name()
				var turns []*Reservation
				for i := range 3 {
					r, err := ls[i%len(ls)].Reserve(ctx, key, 1, 5*time.Second)
					require.NoError(t, err)
					require.True(t, r.Allowed())
					turns = append(turns, r)
				}
				require.Zero(t, turns[0].Delay())
				require.Less(t, turns[1].Delay(), turns[2].Delay())
				turns[2].Cancel(ctx)
				turns[1].Cancel(ctx)
				next, err := ls[0].Reserve(ctx, key, 1, 5*time.Second)
				require.NoError(t, err)
				require.True(t, next.Allowed())
				defer next.Cancel(ctx)
				want := map[Algorithm]time.Duration{TokenBucket: turns[1].Delay(), FixedWindow: turns[2].Delay(), SlidingWindow: turns[2].Delay(), SlidingLog: 3 * time.Second}[alg]
				assert.Equal(t, want, next.Delay(), "the turns at %v and %v given back", turns[1].Delay(), turns[2].Delay())
			})
		}
	}
}

// Hostile Reserves neither fail nor misbehave: keys of any bytes (hash
// tags, NUL, invalid UTF-8, 64 KiB), a cost of MaxInt (never, with no
// promise), a maxDelay just over the bound or negative (an error), Max
// 2^32-1 over 30 days beside 2^29 over 100 ms, whose whole quota every
// turn takes, in memory and on Redis.
func TestHostileReserves(t *testing.T) {
	server := redistest.Start(t)
	keys := []string{"", "{", "}{x}", "\x00\xff\xfe", strings.Repeat("k", 64<<10)}
	for _, alg := range allAlgorithms {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(alg.name()+"/"+where.name, func(t *testing.T) {
				ctx := context.Background()
				limits := []Limit{{Max: math.MaxUint32, Expiration: 30 * 24 * time.Hour}, {Max: 1 << 29, Expiration: 100 * time.Millisecond}}
				if alg == SlidingLog {
					limits = []Limit{{Max: 8, Expiration: 30 * 24 * time.Hour}, {Max: 2, Expiration: 100 * time.Millisecond}}
				}
				clock := newFrozenClock()
				ls := turnReplicas(t, where.server, 2, Config{Algorithm: alg, Limits: limits, Now: clock.Now})
				l := ls[0]
				require.Equal(t, time.Minute, l.longestDelay, "the shortest limit's bound")
				_, err := l.Reserve(ctx, "k", 1, l.longestDelay+time.Millisecond)
				require.ErrorContains(t, err, "maxDelay")
				_, err = l.Reserve(ctx, "k", 1, -1)
				require.ErrorContains(t, err, "maxDelay")
				for _, key := range keys {
					never, err := l.Reserve(ctx, key, math.MaxInt, l.longestDelay)
					require.NoError(t, err)
					assert.False(t, never.Allowed())
					assert.Equal(t, Never, never.RetryAfter(), "a cost above the quota never fits")
					least := limits[1].Max
					var delays []time.Duration
					for i := range 4 {
						r, err := ls[i%len(ls)].Reserve(ctx, key, least, l.longestDelay)
						require.NoError(t, err)
						require.True(t, r.Allowed())
						delays = append(delays, r.Delay())
						r.release()
					}
					// The 100 ms limit's whole quota at every turn; the 30
					// days' limit admits them all.
					if alg != SlidingWindow {
						assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}, delays, "key %q", key[:min(len(key), 8)])
					}
				}
			})
		}
	}
}
