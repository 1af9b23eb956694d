package quota

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/stretchr/testify/require"
)

// A fuzz input is a rule (limit, burst, window: see fuzzRule) and a trace of
// operations on one key, read as pairs of bytes (op%16, arg). Time starts at
// 0 ms and only moves forward; a late request is probed on a copy of the
// state, so the models below never see time go back.
const (
	opTake        = iota // take cost arg%(capacity+3) now; op bytes from opCount up take too
	opTakeHuge           // take a cost at or past the capacity now, picked by arg (hugeCost)
	opWait               // advance arg ms
	opWaitWindows        // advance arg/32 windows
	opJump               // advance 2^(arg%41) ms
	opRefund             // refund the (arg mod n)-th latest of the n admitted takes not refunded yet
	opLate               // probe a take 1+arg ms late (not before 0 ms), of cost (next byte)%(capacity+3)
	opCount
)

const (
	fuzzMaxOps = 200     // operations read from one input
	fuzzMaxNow = 1 << 48 // the key's time stops here (ms; the Redis store's bound)
)

// FuzzFixedWindow checks every decision of the fixed window (see
// fuzzTrace.take) and that no window, tracked independently from the
// decisions, ever counts more than the limit, nor differs from Remaining.
func FuzzFixedWindow(f *testing.F) {
	fuzzAlgorithm(f, FixedWindow, func(r rule) fuzzModel { return &fixedModel{r: r} })
}

// FuzzSlidingWindow checks every decision of the sliding window (see
// fuzzTrace.take) and that, on an independent grid of windows with their
// own counts, every admission keeps cur <= limit and
// prev*(window-elapsed) + cur*window <= limit*window, and Remaining is the
// estimate's.
func FuzzSlidingWindow(f *testing.F) {
	fuzzAlgorithm(f, SlidingWindow, func(r rule) fuzzModel { return &slidingModel{r: r, counts: map[int64]int64{}} })
}

// FuzzTokenBucket checks every decision of the token bucket (see
// fuzzTrace.take) and that over any interval [t1, t2] of the trace the cost
// admitted and not refunded is at most burst + floor(limit*(t2-t1)/window).
func FuzzTokenBucket(f *testing.F) {
	fuzzAlgorithm(f, TokenBucket, func(r rule) fuzzModel { return &tokenModel{r: r} })
}

// fuzzAlgorithm seeds f and fuzzes alg's step functions against a fresh
// model of each input's rule.
func fuzzAlgorithm(f *testing.F, alg Algorithm, newModel func(rule) fuzzModel) {
	large := func(x uint64) uint64 { return 8 * (x - 1) } // fuzzSize's encoding of a size above small
	seeds := []struct {
		limit, burst, window uint64
		ops                  []byte
	}{
		// Limit 1: the second take waits for the window; cost 0 always passes.
		{1, 1, 1000, []byte{opTake, 1, opTake, 1, opTake, 0, opWait, 200, opTake, 1, opWaitWindows, 32, opTake, 1, opTake, 0}},
		// Costs past the capacity (4 of 3, then every hugeCost), between admitted ones.
		{3, 2, 1000, []byte{opTake, 4, opTake, 2, opTakeHuge, 0, opTakeHuge, 1, opTakeHuge, 2, opTakeHuge, 3, opTakeHuge, 4, opTakeHuge, 5, opTake, 1}},
		// Refunds: at once, in the next window, and after the cost expired or refilled.
		{5, 5, 1000, []byte{opTake, 3, opTake, 2, opRefund, 0, opTake, 2, opWait, 250, opRefund, 1, opTake, 4,
			opWaitWindows, 40, opRefund, 0, opTake, 5, opWaitWindows, 64, opRefund, 0, opTake, 5, opTake, 1}},
		// Large jumps, up to 2^40 ms, and a bucket whose burst is below its rate.
		{10, 4, 60_000, []byte{opJump, 40, opTake, 4, opTake, 3, opJump, 16, opTake, 2, opRefund, 1, opJump, 35, opTakeHuge, 0, opTake, 1}},
		// A window of 1 ms, with late requests.
		{2, 3, 1, []byte{opTake, 2, opTake, 1, opWait, 0, opTake, 1, opWait, 1, opTake, 2, opLate, 0, 1, opWait, 1, opLate, 3, 2, opTake, 1}},
		// A late request, and sliding estimates across a window's edge.
		{10, 10, 1000, []byte{opTake, 8, opWait, 100, opLate, 50, 1, opWaitWindows, 32, opTake, 2, opTake, 1, opWait, 125, opTake, 1, opTake, 3}},
		// The largest limits and windows the arithmetic allows.
		{large(maxLimit), large(maxLimit), 7, []byte{opTakeHuge, 0, opTakeHuge, 2, opWait, 1, opTakeHuge, 2, opRefund, 0, opJump, 33, opTakeHuge, 0, opRefund, 1}},
		{1, 1, large(timestep.MaxProduct), []byte{opTake, 1, opJump, 40, opTake, 1, opWaitWindows, 33, opTake, 1}},
		// Found by fuzzing, fixed: a late sliding take of cost 0 was rejected
		// (take(0, 2), take(15, 1), then take(12, 0) at limit 2 per 10 ms).
		{2, 2, 10, []byte{0, 2, 2, 15, 0, 1, 6, 2, 0}},
		// Found by fuzzing, fixed: a bucket refund 2^33 ms late overflowed
		// (countedIn-now)*limit and credited a cost refilled long before.
		{17179869176, 17179869176, 1000, []byte{1, 0, 4, 33, 1, 0, 5, 1, 1, 0}},
	}
	for _, s := range seeds {
		f.Add(s.limit, s.burst, s.window, s.ops)
	}
	f.Fuzz(func(t *testing.T, limit, burst, window uint64, ops []byte) {
		r := fuzzRule(alg, limit, burst, window)
		tr := &fuzzTrace{t: t, alg: alg, r: r, model: newModel(r)}
		tr.run(ops)
	})
}

// fuzzRule maps fuzz inputs to a valid rule: mostly small limits and bursts
// (1..50) and windows (1..5000 ms), sometimes anything the arithmetic allows.
// burst is only the token bucket's.
func fuzzRule(alg Algorithm, limit, burst, window uint64) rule {
	w := fuzzSize(window, 5000, timestep.MaxProduct)
	r := rule{max: min(fuzzSize(limit, 50, maxLimit), timestep.MaxProduct/w), window: w}
	r.burst = r.max
	if alg == TokenBucket {
		r.burst = min(fuzzSize(burst, 50, maxLimit), timestep.MaxProduct/w)
	}
	return r
}

// fuzzSize maps v into [1, large]: v itself when it is in [1, small] (so
// seeds read plainly), 1 + v/8 mod large when v is a multiple of 8, and
// otherwise into [1, small].
func fuzzSize(v uint64, small, large int64) int64 {
	switch {
	case v >= 1 && v <= uint64(small):
		return int64(v)
	case v%8 == 0:
		return 1 + int64(v/8%uint64(large))
	}
	return 1 + int64(v%uint64(small))
}

// hugeCost is a cost at the edge of capacity or far past it.
func hugeCost(capacity, arg int64) int64 {
	return [...]int64{capacity, capacity + 1, max(0, capacity-1), 2 * capacity, math.MaxInt64, timestep.MaxProduct}[arg%6]
}

// fuzzTrace plays one fuzz input against a step function and a model.
type fuzzTrace struct {
	t        *testing.T
	alg      Algorithm
	r        rule
	model    fuzzModel
	s        state      // the key's state
	now      int64      // the key's time, ms
	admitted []admitted // every admitted take, in order

	// The take being checked, for failure messages.
	step     int
	at, cost int64
	d        Decision
}

type admitted struct {
	cost     int64
	d        Decision
	refunded bool
}

func (tr *fuzzTrace) String() string {
	return fmt.Sprintf("%s %+v, op %d: take of cost %d at %d ms (key time %d ms) from %+v decided %+v",
		tr.alg.name(), tr.r, tr.step, tr.cost, tr.at, tr.now, tr.s, tr.d)
}

func (tr *fuzzTrace) run(ops []byte) {
	capacity := tr.r.burst
	for tr.step = 0; tr.step < fuzzMaxOps && len(ops) >= 2; tr.step++ {
		op, arg := ops[0]%16, int64(ops[1])
		ops = ops[2:]
		switch op {
		case opTakeHuge:
			tr.take(tr.now, hugeCost(capacity, arg))
		case opWait:
			tr.advance(arg)
		case opWaitWindows:
			tr.advance(arg * tr.r.window / 32)
		case opJump:
			tr.advance(1 << (arg % 41))
		case opRefund:
			tr.refund(arg)
		case opLate:
			cost := int64(0)
			if len(ops) > 0 {
				cost, ops = int64(ops[0]), ops[1:]
			}
			tr.take(max(0, tr.now-1-arg), cost%(capacity+3))
		default:
			tr.take(tr.now, arg%(capacity+3))
		}
	}
}

func (tr *fuzzTrace) advance(ms int64) { tr.now = min(tr.now+ms, fuzzMaxNow) }

// take decides a take of cost at at (the key's time, or earlier for a late
// request) and checks the decision:
//   - Limit is the capacity (limit, or the bucket's burst); Remaining is in
//     [0, Limit] and exact: a take of Remaining right after is admitted, one
//     of Remaining+1 is not; ResetAfter and RetryAfter are >= 0.
//   - RetryAfter is Never exactly when cost > capacity; it is 0 when
//     admitted; a cost of 0 is admitted.
//   - A rejected take leaves the state unchanged, and its finite RetryAfter
//     is positive and at most ResetAfter.
//   - RetryAfter is exact: the same take is admitted at now+RetryAfter, and
//     not 1 ms earlier. ResetAfter is exact: a take of the whole capacity is
//     admitted at now+ResetAfter, and not 1 ms earlier. (Both are skipped when
//     they saturate at Never-1, about 292 years.)
//   - A late take is never admitted where the same take at the key's time
//     would be rejected.
//
// A take at the key's time is kept, and its admission checked by the model.
func (tr *fuzzTrace) take(at, cost int64) {
	capacity := tr.r.burst
	s, d := tr.alg.take(tr.s, at, tr.r, cost)
	tr.at, tr.cost, tr.d = at, cost, d

	tr.check(d.Limit == int(capacity), "Limit is not the capacity")
	tr.check(d.Remaining >= 0 && d.Remaining <= d.Limit, "Remaining outside [0, Limit]")
	tr.check(d.ResetAfter >= 0 && d.RetryAfter >= 0, "negative ResetAfter or RetryAfter")
	tr.check((cost > capacity) == (d.RetryAfter == Never), "RetryAfter is Never but for cost > capacity")
	tr.check(cost > 0 || d.Allowed, "cost 0 rejected")
	if d.Allowed {
		tr.check(d.RetryAfter == 0, "admitted with a RetryAfter")
	} else {
		tr.check(s == tr.s, "a rejected take changed the state")
		tr.check(d.RetryAfter > 0, "rejected with RetryAfter 0")
		tr.check(d.RetryAfter == Never || d.ResetAfter >= d.RetryAfter, "ResetAfter < RetryAfter")
	}
	tr.check(tr.admits(s, at, int64(d.Remaining)), "a take of Remaining is rejected")
	tr.check(!tr.admits(s, at, int64(d.Remaining)+1), "a take of Remaining+1 is admitted")

	if at < tr.now {
		tr.check(!d.Allowed || tr.admits(tr.s, tr.now, cost), "admitted late but not on time")
		return
	}
	if retry, ok := ceilMillis(d.RetryAfter); ok && !d.Allowed {
		tr.check(tr.admits(tr.s, at+retry, cost), "rejected at RetryAfter")
		tr.check(!tr.admits(tr.s, at+retry-1, cost), "admitted 1 ms before RetryAfter")
	}
	if reset, ok := ceilMillis(d.ResetAfter); ok {
		tr.check(tr.admits(s, at+reset, capacity), "capacity not available at ResetAfter")
		tr.check(reset == 0 || !tr.admits(s, at+reset-1, capacity), "capacity available 1 ms before ResetAfter")
	}
	if d.Allowed {
		if err := tr.model.admit(at, cost); err != nil {
			require.NoError(tr.t, err, tr)
		}
		tr.admitted = append(tr.admitted, admitted{cost: cost, d: d})
	}
	if want := tr.model.remaining(at); want >= 0 && want != int64(d.Remaining) {
		require.Equal(tr.t, want, int64(d.Remaining), "Remaining differs from the model's: %v", tr)
	}
	tr.s = s
}

// check fails the input when ok is false. (A passing testify assertion
// costs a stack walk, and some format their message up front: most of a
// run's time.)
func (tr *fuzzTrace) check(ok bool, what string) {
	if !ok {
		require.Fail(tr.t, what, tr)
	}
}

// admits reports whether a take of cost at at would be admitted from s.
func (tr *fuzzTrace) admits(s state, at, cost int64) bool {
	_, d := tr.alg.take(s, at, tr.r, cost)
	return d.Allowed
}

// ceilMillis is d in whole milliseconds, rounded up, unless d is Never
// or saturated at Never-1.
func ceilMillis(d time.Duration) (int64, bool) {
	if d >= Never-1 {
		return 0, false
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond), true
}

// refund refunds, at the key's time, the (arg mod n)-th latest of the n
// admitted takes not refunded yet: each at most once, as a request ends once.
func (tr *fuzzTrace) refund(arg int64) {
	var pending []int
	for i := len(tr.admitted) - 1; i >= 0; i-- {
		if !tr.admitted[i].refunded {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return
	}
	i := pending[arg%int64(len(pending))]
	if tr.alg == TokenBucket {
		// Latest first: see tokenModel.admit for why the bucket's bound
		// holds only for refunds in that order.
		i = pending[0]
	}
	a := &tr.admitted[i]
	a.refunded = true
	tr.s = tr.alg.adjust(refundTaken, tr.s, tr.now, tr.r, a.cost, a.d)
	if err := tr.model.refund(tr.now, i); err != nil {
		require.NoError(tr.t, err, "op %d: refund of admitted take %d (cost %d) at %d ms", tr.step, i, a.cost, tr.now)
	}
}

// fuzzModel accounts for admitted cost apart from the step function's state,
// by the algorithm's documented rules, so a target can check its bound.
type fuzzModel interface {
	// admit records the next admitted take, of cost at now (never earlier
	// than the last call), or says why the algorithm must not admit it.
	admit(now, cost int64) error
	// refund credits the i-th admitted take back at now, if its window
	// still counts.
	refund(now int64, i int) error
	// remaining is the Remaining a take at now must report, or -1 when
	// the model cannot say.
	remaining(now int64) int64
}

// fixedModel: a window starts at a counted (cost > 0) take when none is
// running, runs for the rule's window, and ends early once refunds have
// emptied it.
type fixedModel struct {
	r       rule
	start   int64 // the last window's start, ms
	count   int64 // cost counted in it
	n       int64 // the last window's number
	counted []fixedAt
}

type fixedAt struct{ n, cost int64 } // an admitted take's window number and cost

func (m *fixedModel) running(now int64) bool { return m.count > 0 && now < m.start+m.r.window }

func (m *fixedModel) admit(now, cost int64) error {
	if cost > 0 && !m.running(now) {
		m.n, m.start, m.count = m.n+1, now, 0
	}
	m.count += cost
	m.counted = append(m.counted, fixedAt{m.n, cost})
	if m.count > m.r.max {
		return fmt.Errorf("window %d from %d ms counts %d > limit", m.n, m.start, m.count)
	}
	return nil
}

func (m *fixedModel) refund(now int64, i int) error {
	if a := m.counted[i]; a.n == m.n && m.running(now) {
		m.count -= a.cost
	}
	if m.count < 0 {
		return errors.New("window count below 0")
	}
	return nil
}

func (m *fixedModel) remaining(now int64) int64 {
	if m.running(now) {
		return m.r.max - m.count
	}
	return m.r.max
}

// slidingModel: windows form a grid from an anchor, set at a take when the
// window it falls in and the one before are both empty; each window keeps
// the cost counted in it.
type slidingModel struct {
	r       rule
	anchor  int64           // the grid's origin, ms
	epoch   int             // the grid's number
	counts  map[int64]int64 // cost counted per window of the grid
	counted []slidingAt     // where each admitted take was counted
}

type slidingAt struct {
	epoch        int
	window, cost int64
}

// at returns now's window k on the grid, the costs counted in it and in the
// one before, and the time elapsed since k started, starting a new grid at
// now if both are empty.
func (m *slidingModel) at(now int64) (k, cur, prev, elapsed int64) {
	k = (now - m.anchor) / m.r.window
	cur, prev = m.counts[k], m.counts[k-1]
	if cur == 0 && prev == 0 {
		m.anchor, m.epoch, k = now, m.epoch+1, 0
		clear(m.counts)
	}
	return k, cur, prev, now - m.anchor - k*m.r.window
}

func (m *slidingModel) admit(now, cost int64) error {
	k, cur, prev, elapsed := m.at(now)
	cur += cost
	m.counts[k] = cur
	m.counted = append(m.counted, slidingAt{epoch: m.epoch, window: k, cost: cost})
	W, limit := m.r.window, m.r.max
	if cur > limit || prev*(W-elapsed)+cur*W > limit*W {
		return fmt.Errorf("window %d of grid %d ms (%d ms in) counts %d after %d: over the limit", k, m.anchor, elapsed, cur, prev)
	}
	return nil
}

func (m *slidingModel) refund(now int64, i int) error {
	a := m.counted[i]
	k := (now - m.anchor) / m.r.window
	if a.epoch == m.epoch && (a.window == k || a.window == k-1) {
		m.counts[a.window] -= a.cost
		if m.counts[a.window] < 0 {
			return fmt.Errorf("window %d count below 0", a.window)
		}
	}
	return nil
}

func (m *slidingModel) remaining(now int64) int64 {
	_, cur, prev, elapsed := m.at(now)
	W := m.r.window
	return max(0, m.r.max*W-prev*(W-elapsed)-cur*W) / W
}

// tokenModel keeps every admitted take, to bound the cost admitted over
// each interval ending at the latest admission.
type tokenModel struct {
	r       rule
	counted []tokenAt
}

type tokenAt struct {
	at, cost int64
	refunded bool
}

// admit checks, for every earlier admission time t1, that the cost admitted
// in [t1, now] and not refunded is at most burst + floor(limit*(now-t1)/W).
// A refund should credit at most what the bucket has not refilled of it, so
// the takes not refunded were admissible in a bucket that never had the
// others.
//
// The bound holds for refunds made latest first (the trace makes them so).
// Out of that order it can be exceeded, by at most the cost of the earlier
// requests refunded in between: a refund credits what of the request has not
// refilled by the time its Decision named (countedIn), and an earlier
// request's refund since has moved that time forward unseen, so the refund
// may credit what has in fact refilled. Minimal: rule{limit: 1, burst: 2,
// window: 10}: a := take(0, 1), b := take(0, 1), refund a at 0, take(10, 2),
// refund b at 10 (its token refilled at 10, once a's was back), and
// take(10, 1) is admitted: 3 tokens at 10 ms. README documents this.
func (m *tokenModel) admit(now, cost int64) error {
	m.counted = append(m.counted, tokenAt{at: now, cost: cost})
	sum := int64(0)
	for i := len(m.counted) - 1; i >= 0; i-- {
		a := m.counted[i]
		if !a.refunded {
			sum += a.cost
		}
		hi, lo := bits.Mul64(uint64(m.r.max), uint64(now-a.at))
		if hi >= uint64(m.r.window) {
			break // the refill alone bounds nothing from here back
		}
		refill, _ := bits.Div64(hi, lo, uint64(m.r.window))
		if refill < uint64(sum) && sum-int64(refill) > m.r.burst {
			return fmt.Errorf("%d admitted in [%d, %d] ms, more than burst + %d refilled", sum, a.at, now, refill)
		}
	}
	return nil
}

func (m *tokenModel) refund(_ int64, i int) error {
	m.counted[i].refunded = true
	return nil
}

func (m *tokenModel) remaining(int64) int64 { return -1 }
