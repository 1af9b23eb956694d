package quota

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests check leases against what the exact path (a script call per
// take) allows, on a real Redis, with replicas that keep time by Redis
// (the default). A take is known only from the outside: the test's
// monotonic clock read before the call and after it brackets the instant
// it was decided, whether in Redis (the script's TIME) or from a share
// (the replica's clock under its lock). Every check counts a take inside
// an interval only when its whole bracket lies inside, so that it can only
// fail on takes that surely broke the limit; a slow machine widens the
// brackets and weakens the check, but never makes it fail.

// leaseTake is a take as a caller saw it.
type leaseTake struct {
	from, to float64 // ms on the log's clock: the call's start and return
	cost     int64
	replica  int
	res      Result
}

// leaseLog records takes on the test's monotonic clock.
type leaseLog struct {
	origin time.Time
	mu     sync.Mutex
	takes  []leaseTake
}

func newLeaseLog() *leaseLog { return &leaseLog{origin: time.Now()} }

// ms is the log's clock: ms since its origin, monotonic.
func (g *leaseLog) ms() float64 { return float64(time.Since(g.origin)) / float64(time.Millisecond) }

// take takes cost for key from replica i and records it.
func (g *leaseLog) take(t *testing.T, ls []*Limiter, i int, key string, cost int) (Result, bool) {
	from := g.ms()
	res, err := ls[i].Take(context.Background(), key, cost)
	to := g.ms()
	if !assert.NoError(t, err) {
		return res, false
	}
	g.mu.Lock()
	g.takes = append(g.takes, leaseTake{from: from, to: to, cost: int64(cost), replica: i, res: res})
	g.mu.Unlock()
	return res, true
}

// admitted returns the admitted takes, by start.
func (g *leaseLog) admitted() []leaseTake {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []leaseTake
	for _, tk := range g.takes {
		if tk.res.Allowed() {
			out = append(out, tk)
		}
	}
	slices.SortFunc(out, func(a, b leaseTake) int { return cmp.Compare(a.from, b.from) })
	return out
}

// redisOffset bounds Redis's clock (Unix ms, as the scripts read TIME)
// less the log's: a TIME read between the log's before and after was
// taken at a local instant in [before, after], so the offset lies in
// [time-after, time-before]; many reads narrow it to about a round trip.
// Both clocks are this machine's (Redis is on loopback) and run at the
// same rate but for NTP's slew (at most 0.5 ms a second); the test reads
// the offset before and after the traffic and keeps the union, which
// covers a drift in between.
func (g *leaseLog) redisOffset(t *testing.T, c *goredis.Client) (lo, hi float64) {
	t.Helper()
	lo, hi = math.Inf(-1), math.Inf(1)
	for range 50 {
		before := g.ms()
		now, err := c.Time(context.Background()).Result()
		after := g.ms()
		require.NoError(t, err)
		r := float64(now.UnixMicro()) / 1000
		lo, hi = max(lo, r-after), min(hi, r-before)
	}
	require.LessOrEqual(t, lo, hi)
	return lo, hi
}

// checkFixedWindows checks fixed-window takes (in Redis time, given the
// offset's bounds lo and hi) against the exact path: a window of E starts
// at a key's first counted take, counts at most Max and ends; the next
// take starts the next. The windows are those the store ran, each
// admitted take naming the one that counted it (Decision.countedIn, its
// start in Redis ms). Exact means: every take is spent within the window
// that counted it, and no window admits more than Max, counting the takes
// surely spent in it whichever window counted them.
func checkFixedWindows(t *testing.T, takes []leaseTake, lim Limit, lo, hi float64) {
	t.Helper()
	e := float64(lim.Expiration / time.Millisecond)
	counted := map[int64]int64{}
	for _, tk := range takes {
		s := tk.res.each[0].countedIn
		counted[s] += tk.cost
		assert.False(t, tk.from+lo >= float64(s)+e, "a take at %.1f-%.1f ms (Redis %.0f) was spent after the window of %d that counted it", tk.from, tk.to, tk.from+lo, s)
	}
	for s, n := range counted {
		assert.LessOrEqual(t, n, int64(lim.Max), "the window of %d counted %d", s, n)
		spent := int64(0)
		for _, tk := range takes {
			if tk.from+lo >= float64(s) && tk.to+hi < float64(s)+e {
				spent += tk.cost
			}
		}
		assert.LessOrEqual(t, spent, int64(lim.Max), "%d units were spent in the window from %d", spent, s)
	}
	require.NotEmpty(t, counted)
}

// checkSlidingWindows checks sliding-window takes against the exact path.
// Its store admits a take while prev*(E-elapsed)/E + cur <= Max, where cur
// counts the window running (windows of E follow each other from a key's
// first take) and prev the one before. Between the store's decisions that
// estimate only falls (elapsed grows), and a share is counted in cur when
// it is taken and spent later in the same window, so the estimate of the
// takes as they were spent is never above the store's, which is never
// above Max: the check is that, at the latest instant each admitted take
// may have been spent at, the estimate from the takes surely spent by
// then in its window (cur) and surely spent in the window before (prev)
// is at most Max. Any instant of the window would do; this one puts the
// take itself in cur.
func checkSlidingWindows(t *testing.T, takes []leaseTake, lim Limit, lo, hi float64) {
	t.Helper()
	e := float64(lim.Expiration / time.Millisecond)
	max := float64(lim.Max)
	worst := math.Inf(-1)
	for _, tk := range takes {
		s := float64(tk.res.each[0].countedIn)
		assert.False(t, tk.from+lo >= s+e, "a take at %.1f-%.1f ms was spent after the window of %.0f that counted it", tk.from, tk.to, s)
		at := min(tk.to+hi, s+e-0.001)
		var cur, prev float64
		for _, o := range takes {
			switch {
			case o.from+lo >= s && o.to+hi <= at:
				cur += float64(o.cost)
			case o.from+lo >= s-e && o.to+hi < s:
				prev += float64(o.cost)
			}
		}
		estimate := prev*(e-(at-s))/e + cur
		worst = math.Max(worst, estimate)
		assert.LessOrEqual(t, estimate, max+1e-9, "at %.1f ms (Redis), %.0f ms into the window of %.0f: estimate %.2f (cur %.0f, prev %.0f)", at-hi, at-s, s, estimate, cur, prev)
	}
	t.Logf("highest estimate seen: %.2f of %d", worst, lim.Max)
}

// checkBucket checks token-bucket takes against the exact path: a bucket
// of Burst, refilled at Max per E, admits at most Burst + Max*(b-a)/E
// units in any interval [a, b], plus one for the store's rounding of time
// to whole ms. Only lengths of time matter here, so the takes are checked
// on the log's clock, which runs at Redis's rate. It returns the largest
// excess over the bound (<= 0 when exact).
func checkBucket(t *testing.T, takes []leaseTake, lim Limit) float64 {
	t.Helper()
	return checkBucketWithin(t, takes, lim, 0)
}

// checkBucketWithin is checkBucket allowing slack units over the bound.
func checkBucketWithin(t *testing.T, takes []leaseTake, lim Limit, slack float64) float64 {
	t.Helper()
	burst := float64(cmp.Or(lim.Burst, lim.Max))
	rate := float64(lim.Max) / float64(lim.Expiration/time.Millisecond)
	byFrom := slices.Clone(takes)
	slices.SortFunc(byFrom, func(a, b leaseTake) int { return cmp.Compare(a.from, b.from) })
	// From the latest start back: inside holds the takes that start at a
	// or later, by return; for each, the takes inside that end by b.
	var inside []leaseTake
	worst, worstA, worstB, worstN := math.Inf(-1), 0.0, 0.0, 0.0
	for i := len(byFrom) - 1; i >= 0; i-- {
		tk := byFrom[i]
		at, _ := slices.BinarySearchFunc(inside, tk.to, func(o leaseTake, to float64) int { return cmp.Compare(o.to, to) })
		inside = slices.Insert(inside, at, tk)
		if i > 0 && byFrom[i-1].from == tk.from {
			continue // a is the start of them all
		}
		a, n := tk.from, 0.0
		for _, o := range inside {
			n += float64(o.cost)
			if excess := n - (burst + rate*(o.to-a) + 1); excess > worst {
				worst, worstA, worstB, worstN = excess, a, o.to, n
			}
		}
	}
	assert.LessOrEqual(t, worst, slack+1e-9, "%.0f units were admitted within [%.1f, %.1f] ms, %.2f more than a bucket of %d at %d per %v allows (one unit of rounding included)",
		worstN, worstA, worstB, worst, int(burst), lim.Max, lim.Expiration)
	return worst
}

// checkExact runs the check of alg over the admitted takes of g.
func checkExact(t *testing.T, alg Algorithm, g *leaseLog, lim Limit, lo, hi float64) {
	t.Helper()
	takes := g.admitted()
	switch alg {
	case FixedWindow:
		checkFixedWindows(t, takes, lim, lo, hi)
	case SlidingWindow:
		checkSlidingWindows(t, takes, lim, lo, hi)
	case TokenBucket:
		worst := checkBucket(t, takes, lim)
		t.Logf("closest to the bucket's bound: %.2f units over (<= 0 is within)", worst)
	}
}

// randomTrafficOn runs 4 s of random traffic (a random seed, logged) on
// key "k" of ls, replicas on srv, and returns its log with the offset of
// Redis's clock from the log's, known to lie in [lo, hi] ms.
func randomTrafficOn(t *testing.T, srv *redistest.Server, ls []*Limiter) (g *leaseLog, lo, hi float64) {
	t.Helper()
	g = newLeaseLog()
	admin := srv.Client(t)
	lo1, hi1 := g.redisOffset(t, admin)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	randomLeaseTraffic(t, g, ls, "k", 4*time.Second, seed)
	lo2, hi2 := g.redisOffset(t, admin)
	return g, min(lo1, lo2), max(hi1, hi2)
}

// Three replicas, random traffic on one key, costs of 1 to 3: quiet
// spells, a pace a little below the limit's rate (so that the key is
// leased while the store has room) and bursts from every caller; what
// was admitted never exceeds what the exact path allows in any window.
func TestLeaseRandomTrafficStaysExact(t *testing.T) {
	lim := Limit{Max: 60, Expiration: time.Second}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: []Limit{lim}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})
			require.Equal(t, int64(1), ls[0].base.r[0].stepMillis(), "the checks read countedIn as Redis ms")
			g, lo, hi := randomTrafficOn(t, srv, ls)
			t.Logf("%d takes, %d admitted; Redis clock offset known to %.2f ms", len(g.takes), len(g.admitted()), hi-lo)
			checkExact(t, alg, g, lim, lo, hi)
			leaseSettled(t, ls)
		})
	}
}

// randomLeaseTraffic runs 12 callers, 4 a replica, on key for d: in each
// 1.2 s, 800 ms at about 0.8 times the rate of 60 a second, 200 ms of
// takes back to back, and 200 ms of quiet.
func randomLeaseTraffic(t *testing.T, g *leaseLog, ls []*Limiter, key string, d time.Duration, seed uint64) {
	var wg sync.WaitGroup
	end := g.ms() + float64(d/time.Millisecond)
	for c := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for {
				now := g.ms()
				if now >= end {
					return
				}
				cost := 1
				if rng.IntN(5) == 0 {
					cost = 2 + rng.IntN(2)
				}
				switch phase := math.Mod(now, 1200); {
				case phase < 800:
					time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
				case phase < 1000:
				default:
					time.Sleep(time.Duration(1200-phase) * time.Millisecond)
					continue
				}
				if _, ok := g.take(t, ls, c%len(ls), key, cost); !ok {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// leaseSettled waits for every share of ls to end and go back, and for
// the timer that returns them to have nothing left to do: no lease
// leaves a goroutine or a timer behind the test.
func leaseSettled(t *testing.T, ls []*Limiter) {
	t.Helper()
	waitFor(t, "the leases to end and go back", func() bool {
		for _, l := range ls {
			s, ok := l.decider.(*leasedStore)
			if !ok {
				continue
			}
			q := &s.returns
			q.mu.Lock()
			busy := len(q.queue) > 0 || q.running
			q.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	})
}

// A token-bucket share may be spent while the debt its grant found below
// it has not refilled. A credit that lowered that debt after the grant (a
// refund, or another share's unused units given back) would let the later
// share's units count as refilled before they are spent: spent then, with
// the store drained at the same time, the replicas would admit more than
// a full bucket at once. So a bucket with leases takes no refund, and its
// shares give nothing back; here two replicas try both, then drain the
// key: never more than the bucket allows.
func TestLeaseBucketShareSpentAfterAnEarlierReturn(t *testing.T) {
	lim := Limit{Max: 100, Expiration: time.Second, Burst: 300}
	srv := redistest.Start(t)
	ls := leaseReplicas(t, srv, 2, Config{Algorithm: TokenBucket, Limits: []Limit{lim}, Lease: 500 * time.Millisecond, StorageTimeout: slowMachine})
	g := newLeaseLog()
	ctx := context.Background()
	a, b := 0, 1
	// A drains the bucket until its debt lasts more than a lease, and then
	// holds a share of 80 that it tries to refund, leaving it unused.
	for range 120 {
		g.take(t, ls, a, "k", 1)
	}
	big, err := ls[a].Take(ctx, "k", 80)
	require.NoError(t, err)
	require.Equal(t, SourceLease, big.Source(), "A's take of 80 is a grant")
	_, err = ls[a].Refund(ctx, "k", 80, &big)
	require.ErrorIs(t, err, errLeasedBucketRefund)
	// B is hot and takes a share whose grant finds A's 80 in the debt, and
	// tries to refund it too.
	for range 5 {
		g.take(t, ls, b, "k", 1)
	}
	bigB, err := ls[b].Take(ctx, "k", 40)
	require.NoError(t, err)
	require.Equal(t, SourceLease, bigB.Source(), "B's take of 40 is a grant")
	_, err = ls[b].Refund(ctx, "k", 40, &bigB)
	require.ErrorIs(t, err, errLeasedBucketRefund)
	// A's lease ends (with nothing given back) while B's is still out; then
	// both drain the store.
	time.Sleep(300 * time.Millisecond)
	for range 300 {
		g.take(t, ls, b, "k", 1)
		g.take(t, ls, a, "k", 1)
	}
	checkBucket(t, g.admitted(), lim)
	leaseSettled(t, ls)
}

// Redis killed while a replica holds a share: the share goes on deciding
// (SourceLease) until it is spent or its lease ends, and then the failure
// policy answers as it does without leases (FailFallback rejects for a
// second while a timed-out call may yet count, then decides in memory:
// see failedTake); nothing fails.
func TestLeaseRedisKilledMidLease(t *testing.T) {
	for _, policy := range []FailurePolicy{FailFallback, FailClosed, FailOpen} {
		source := map[FailurePolicy]Source{FailFallback: SourceFallback, FailClosed: SourceFailClosed, FailOpen: SourceFailOpen}[policy]
		t.Run(source.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			lease := 600 * time.Millisecond
			ls := leaseReplicas(t, srv, 1, Config{Limits: []Limit{{Max: 1000, Expiration: 10 * time.Second}}, Lease: lease, FailurePolicy: policy})
			l, ctx := ls[0], context.Background()
			for range 40 {
				requireAllowed(t, l, "k")
			}
			s := l.decider.(*leasedStore)
			sh := s.shard("k")
			sh.mu.Lock()
			share := *sh.keys["k"].share
			killedAt := s.guard.now()
			sh.mu.Unlock()
			require.NotZero(t, share.id, "the key holds a share")
			left, ends := share.taken-share.used, share.ends
			require.Greater(t, ends, killedAt+50, "the share has time left")
			srv.Stop()

			var fromShare, fromPolicy, admittedByPolicy int64
			deadline := time.Now().Add(10 * time.Second)
			for s.guard.now() < ends+200 || policy != FailClosed && admittedByPolicy == 0 {
				require.True(t, time.Now().Before(deadline), "the policy admitted nothing")
				before := s.guard.now()
				res, err := l.Take(ctx, "k", 1)
				require.NoError(t, err)
				switch res.Source() {
				case SourceLease:
					require.True(t, res.Allowed())
					require.Zero(t, fromPolicy, "the share decides after the policy did")
					require.Less(t, before, ends, "the share decides after its lease ended")
					fromShare++
				case source:
					fromPolicy++
					switch {
					case res.Allowed():
						require.NotEqual(t, FailClosed, policy)
						admittedByPolicy++
					case policy == FailFallback:
						require.Equal(t, slowRetry, res.RetryAfter(), "FailFallback rejects only a take that may yet count")
					default:
						require.Equal(t, FailClosed, policy)
					}
				default:
					t.Fatalf("answered by %v", res.Source())
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("%d of the share's %d left decided after the kill, %d by the policy (%d admitted)", fromShare, left, fromPolicy, admittedByPolicy)
			assert.Positive(t, fromShare, "the share decides while Redis is down")
			assert.LessOrEqual(t, fromShare, left, "no more than the share held")
			assert.Positive(t, fromPolicy, "the policy answers once the lease has ended")
			leaseSettled(t, ls) // the failed return is tried again, then dropped
		})
	}
}

// Under-admission: three replicas on one key at 1, 1.5 and 3 times the
// limit's rate for 3 s, each take on a fixed schedule. The denominator is
// what the exact path admits of the same takes at the same times (the
// in-memory step functions, replaying them): leases keep at least 95% of
// it at 1.5x and 3x. (At 1x the exact path itself admits almost every
// take, and a share held where it is not needed shows most: the figure
// is logged.)
func TestLeaseUnderAdmission(t *testing.T) {
	lim := Limit{Max: 100, Expiration: time.Second}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		for _, load := range []float64{1, 1.5, 3} {
			t.Run(alg.String()+"/"+strconv.FormatFloat(load, 'f', -1, 64)+"x", func(t *testing.T) {
				srv := redistest.Start(t)
				ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: []Limit{lim}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})
				g := newLeaseLog()
				const callers = 6
				every := float64(callers) * float64(lim.Expiration/time.Millisecond) / (load * float64(lim.Max))
				var wg sync.WaitGroup
				for c := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							at := (float64(i) + float64(c)/callers) * every
							if at >= 3000 {
								return
							}
							if wait := at - g.ms(); wait > 0 {
								time.Sleep(time.Duration(wait * float64(time.Millisecond)))
							}
							if _, ok := g.take(t, ls, c%3, "k", 1); !ok {
								return
							}
						}
					}()
				}
				wg.Wait()
				got := int64(len(g.admitted()))
				exact := exactAdmissions(t, alg, lim, g)
				ratio := float64(got) / float64(exact)
				t.Logf("%s at %.1fx: %d takes, %d admitted, the exact path %d: %.3f", alg, load, len(g.takes), got, exact, ratio)
				assert.LessOrEqual(t, got, exact+int64(lim.Max)/20, "more than the exact path, beyond the replay's timing")
				if load > 1 {
					assert.GreaterOrEqual(t, ratio, 0.95)
				}
				leaseSettled(t, ls)
			})
		}
	}
}

// exactAdmissions replays g's takes, at their starts, through an
// in-memory limiter of alg and lim, and counts what it admits.
func exactAdmissions(t *testing.T, alg Algorithm, lim Limit, g *leaseLog) int64 {
	takes := slices.Clone(g.takes)
	slices.SortFunc(takes, func(a, b leaseTake) int { return cmp.Compare(a.from, b.from) })
	var now time.Time
	base := time.Unix(1_700_000_000, 0)
	mem, err := New(Config{Algorithm: alg, Limits: []Limit{lim}, Now: func() time.Time { return now }})
	require.NoError(t, err)
	n := int64(0)
	for _, tk := range takes {
		now = base.Add(time.Duration(tk.from * float64(time.Millisecond)))
		res, err := mem.Take(context.Background(), "k", int(tk.cost))
		require.NoError(t, err)
		if res.Allowed() {
			n += tk.cost
		}
	}
	return n
}
