package quota

import (
	"fmt"
	"github.com/fiberlimit/limiter/internal/timestep"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const ms = int64(1) // the step functions count milliseconds

// stepCase is one call of a step function at a time (ms) and what it must
// decide. refund credits back the cost of the last admitted take instead.
type stepCase struct {
	at     int64
	cost   int64
	limit  int64 // 0: the table's rule
	refund bool
	want   Decision // countedIn is not compared
}

func allow(limit, remaining int, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func deny(limit, remaining int, reset, retry time.Duration) Decision {
	return Decision{Limit: limit, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

// runSteps plays the steps against one key's state.
func runSteps(t *testing.T, alg Algorithm, r rule, steps []stepCase) {
	t.Helper()
	var s state
	var last Decision
	var lastCost int64
	for i, st := range steps {
		rr := r
		if st.limit != 0 {
			rr.max, rr.burst = st.limit, st.limit
		}
		if st.refund {
			s = alg.adjust(refundTaken, s, st.at, rr, lastCost, last)
			continue
		}
		var d Decision
		s, d = alg.take(s, st.at, rr, st.cost)
		if d.Allowed {
			last, lastCost = d, st.cost
		}
		d.countedIn = 0
		require.Equal(t, st.want, d, "step %d at %dms cost %d", i, st.at, st.cost)
		require.GreaterOrEqual(t, d.ResetAfter, time.Duration(0))
		if d.RetryAfter != Never && !d.Allowed {
			require.GreaterOrEqual(t, d.ResetAfter, d.RetryAfter, "step %d: ResetAfter < RetryAfter", i)
		}
	}
}

// tick is n of the step functions' time units.
func tick(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func TestFixedWindowSteps(t *testing.T) {
	sec := 1000 * ms
	r := rule{max: 3, burst: 3, window: sec}
	tests := []struct {
		name  string
		steps []stepCase
	}{
		{"counts to the limit and resets at the window's end", []stepCase{
			{at: 0, cost: 1, want: allow(3, 2, time.Second)},
			{at: 500 * ms, cost: 1, want: allow(3, 1, 500*time.Millisecond)},
			{at: sec - 1, cost: 1, want: allow(3, 0, tick(1))},
			{at: sec - 1, cost: 1, want: deny(3, 0, tick(1), tick(1))},
			{at: sec, cost: 1, want: allow(3, 2, time.Second)},
		}},
		{"window starts at the first counted hit", []stepCase{
			{at: 250 * ms, cost: 3, want: allow(3, 0, time.Second)},
			{at: sec, cost: 1, want: deny(3, 0, 250*time.Millisecond, 250*time.Millisecond)},
			{at: sec + 250*ms, cost: 1, want: allow(3, 2, time.Second)},
		}},
		{"rejected requests consume nothing", []stepCase{
			{at: 0, cost: 3, want: allow(3, 0, time.Second)},
			{at: 10 * ms, cost: 1, want: deny(3, 0, 990*time.Millisecond, 990*time.Millisecond)},
			{at: 20 * ms, cost: 1, want: deny(3, 0, 980*time.Millisecond, 980*time.Millisecond)},
			{at: sec, cost: 3, want: allow(3, 0, time.Second)},
		}},
		{"cost larger than what is left waits for the window", []stepCase{
			{at: 0, cost: 2, want: allow(3, 1, time.Second)},
			{at: 0, cost: 2, want: deny(3, 1, time.Second, time.Second)},
			{at: 0, cost: 1, want: allow(3, 0, time.Second)},
		}},
		{"cost above the limit is never admitted", []stepCase{
			{at: 0, cost: 4, want: deny(3, 3, 0, Never)},
			{at: 0, cost: 1, want: allow(3, 2, time.Second)},
			{at: 0, cost: 4, want: deny(3, 2, time.Second, Never)},
		}},
		{"cost zero is admitted uncounted", []stepCase{
			{at: 0, cost: 3, want: allow(3, 0, time.Second)},
			{at: 0, cost: 0, want: allow(3, 0, time.Second)},
		}},
		{"refund credits the window it was counted in", []stepCase{
			{at: 0, cost: 2, want: allow(3, 1, time.Second)},
			{at: 10 * ms, refund: true},
			// Nothing is counted any more, so the next counted hit starts a window.
			{at: 20 * ms, cost: 3, want: allow(3, 0, time.Second)},
		}},
		{"refund after the window ended changes nothing", []stepCase{
			{at: 0, cost: 3, want: allow(3, 0, time.Second)},
			{at: sec, cost: 3, want: allow(3, 0, time.Second)},
			{at: sec + 1, cost: 1, want: deny(3, 0, time.Second-tick(1), time.Second-tick(1))},
		}},
		{"a lower per-request limit (MaxFunc) never shows negative remaining", []stepCase{
			{at: 0, cost: 3, want: allow(3, 0, time.Second)},
			{at: 1, cost: 1, limit: 2, want: deny(2, 0, time.Second-tick(1), time.Second-tick(1))},
			{at: 2, cost: 1, limit: 10, want: allow(10, 6, time.Second-tick(2))},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, FixedWindow, r, tt.steps) })
	}
}

func TestFixedWindowRefundOnlyInItsWindow(t *testing.T) {
	sec := 1000 * ms
	r := rule{max: 3, burst: 3, window: sec}
	var s state
	s, d := FixedWindow.take(s, 0, r, 1)
	require.True(t, d.Allowed)
	s, _ = FixedWindow.take(s, sec+5, r, 2) // a new window, counted 2
	s = FixedWindow.adjust(refundTaken, s, sec+6, r, 1, d)
	require.Equal(t, int64(2), s.b, "a refund must not credit a later window")
}

func TestSlidingWindowSteps(t *testing.T) {
	sec := 1000 * ms
	r := rule{max: 10, burst: 10, window: sec}
	tests := []struct {
		name  string
		steps []stepCase
	}{
		{"previous window is weighted by what is left of it", []stepCase{
			{at: 0, cost: 10, want: allow(10, 0, 2*time.Second)},
			// cur 10, next window at 1s: at e after it, 10*(1-e) + 1 <= 10 from e = 0.1s.
			{at: 500 * ms, cost: 1, want: deny(10, 0, 1500*time.Millisecond, 600*time.Millisecond)},
			{at: 1100*ms - 1, cost: 1, want: deny(10, 0, 900*time.Millisecond+tick(1), tick(1))},
			{at: 1100 * ms, cost: 1, want: allow(10, 0, 1900*time.Millisecond)},
			// 10*0.5 + 1 = 6 counted: 4 left, take 1.
			{at: 1500 * ms, cost: 1, want: allow(10, 3, 1500*time.Millisecond)},
			// 10*0.25 + 2 = 4.5: 5 left (floor), cost 5 fits.
			{at: 1750 * ms, cost: 5, want: allow(10, 0, 1250*time.Millisecond)},
		}},
		{"retry inside the current window as the previous one fades", []stepCase{
			{at: 0, cost: 8, want: allow(10, 2, 2*time.Second)},
			{at: sec, cost: 2, want: allow(10, 0, 2*time.Second)},
			// 8*(1-e) + 2 + 1 <= 10  <=>  e >= 1/8 s
			{at: sec, cost: 1, want: deny(10, 0, 2*time.Second, 125*time.Millisecond)},
			{at: sec + 125*ms, cost: 1, want: allow(10, 0, 1875*time.Millisecond)},
		}},
		{"state fades completely after two windows", []stepCase{
			{at: 0, cost: 10, want: allow(10, 0, 2*time.Second)},
			{at: 2 * sec, cost: 1, want: allow(10, 9, 2*time.Second)},
		}},
		{"a window with only previous hits resets when it ends", []stepCase{
			{at: 0, cost: 4, want: allow(10, 6, 2*time.Second)},
			{at: sec + 500*ms, cost: 0, want: allow(10, 8, 500*time.Millisecond)},
		}},
		{"cost above the limit is never admitted", []stepCase{
			{at: 0, cost: 11, want: deny(10, 10, 0, Never)},
		}},
		{"refund lands in the previous window after a roll", []stepCase{
			{at: 0, cost: 10, want: allow(10, 0, 2*time.Second)},
			{at: sec, refund: true},
			{at: sec, cost: 10, want: allow(10, 0, 2*time.Second)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, SlidingWindow, r, tt.steps) })
	}
}

func TestTokenBucketSteps(t *testing.T) {
	sec := 1000 * ms
	r := rule{max: 10, burst: 5, window: sec} // 1 token per 100ms, capacity 5
	tests := []struct {
		name  string
		steps []stepCase
	}{
		{"burst, then refill at the rate", []stepCase{
			{at: 0, cost: 5, want: allow(5, 0, 500*time.Millisecond)},
			{at: 0, cost: 1, want: deny(5, 0, 500*time.Millisecond, 100*time.Millisecond)},
			{at: 100*ms - 1, cost: 1, want: deny(5, 0, 400*time.Millisecond+tick(1), tick(1))},
			{at: 100 * ms, cost: 1, want: allow(5, 0, 500*time.Millisecond)},
			{at: 350 * ms, cost: 2, want: allow(5, 0, 450*time.Millisecond)},
			{at: 350 * ms, cost: 1, want: deny(5, 0, 450*time.Millisecond, 50*time.Millisecond)},
		}},
		{"full after a rest, never above capacity", []stepCase{
			{at: 0, cost: 5, want: allow(5, 0, 500*time.Millisecond)},
			{at: 10 * sec, cost: 1, want: allow(5, 4, 100*time.Millisecond)},
		}},
		{"cost above burst is never admitted", []stepCase{
			{at: 0, cost: 6, want: deny(5, 5, 0, Never)},
		}},
		{"cost above what is left waits for enough tokens", []stepCase{
			{at: 0, cost: 3, want: allow(5, 2, 300*time.Millisecond)},
			{at: 0, cost: 4, want: deny(5, 2, 300*time.Millisecond, 200*time.Millisecond)},
			{at: 200 * ms, cost: 4, want: allow(5, 0, 500*time.Millisecond)},
		}},
		{"refund puts tokens back", []stepCase{
			{at: 0, cost: 5, want: allow(5, 0, 500*time.Millisecond)},
			{at: 0, refund: true},
			{at: 0, cost: 5, want: allow(5, 0, 500*time.Millisecond)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, TokenBucket, r, tt.steps) })
	}
}

// A client sending steadily a little above the limit keeps being admitted
// at the limit: rejected requests are not counted (Fiber issue 2578 locks
// such a client out of its sliding window for good).
func TestSteadyClientAboveLimitRecovers(t *testing.T) {
	sec := 1000 * ms
	r := rule{max: 10, burst: 10, window: sec}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.name(), func(t *testing.T) {
			var s state
			perSecond := make([]int, 20)
			for i := int64(0); i < 20*11; i++ { // 11 requests a second
				now := i * sec / 11
				var d Decision
				if s, d = alg.take(s, now, r, 1); d.Allowed {
					perSecond[now/sec]++
				}
			}
			total := 0
			for second, n := range perSecond {
				total += n
				if second >= 2 {
					require.GreaterOrEqual(t, n, 8, "second %d: %v", second, perSecond)
				}
				require.LessOrEqual(t, n, 11, fmt.Sprint(perSecond))
			}
			require.LessOrEqual(t, total, 20*10+10, "more than the rate allows: %v", perSecond)
			require.GreaterOrEqual(t, total, 20*8, "client locked out: %v", perSecond)
		})
	}
}

// Windows of centuries neither overflow nor go negative.
func TestHugeWindowsSaturate(t *testing.T) {
	r := rule{max: 1, burst: 1, window: timestep.Millis(time.Duration(1<<63 - 1))}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		_, d := alg.take(state{}, 1, r, 1)
		require.True(t, d.Allowed, alg.name())
		require.Equal(t, Never-1, d.ResetAfter, alg.name())
		require.Equal(t, int64(9223372037), timestep.Seconds(d.ResetAfter), alg.name())
	}
}

// A bucket refund after the cost has refilled gives nothing back (a slow
// request that fails cannot let two more through a bucket of one).
func TestTokenBucketRefundAfterRefill(t *testing.T) {
	r := rule{max: 1, burst: 1, window: 1000 * ms}
	s, slow := TokenBucket.take(state{}, 0, r, 1)
	require.True(t, slow.Allowed)
	s, d := TokenBucket.take(s, 1000, r, 1)
	require.True(t, d.Allowed)
	s = TokenBucket.adjust(refundTaken, s, 1001, r, 1, slow)
	_, d = TokenBucket.take(s, 1001, r, 1)
	require.False(t, d.Allowed)
	// Half refilled: the half still owed comes back, and no more.
	r2 := rule{max: 2, burst: 2, window: 1000 * ms}
	s, slow = TokenBucket.take(state{}, 0, r2, 2)
	s, d = TokenBucket.take(s, 500, r2, 1) // takes the token refilled meanwhile
	require.True(t, d.Allowed)
	s = TokenBucket.adjust(refundTaken, s, 500, r2, 2, slow)
	require.Equal(t, int64(1000), s.b, "only the later request's token stays owed")
}
