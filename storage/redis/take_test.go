package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each case is a sequence of Takes on one key at given client times, with
// the full Result expected of each. The values follow from the scripts; the
// comments derive the less obvious ones by hand from the semantics.
func TestTakeDecisions(t *testing.T) {
	type step struct {
		at   time.Duration // client clock, from base
		cost int64
		want Result
	}
	tests := []struct {
		name  string
		rule  Rule
		steps []step
	}{
		{
			name: "fixed window",
			rule: Rule{Algorithm: FixedWindow, Max: 3, Expiration: time.Second},
			steps: []step{
				// Cost above the limit, on a fresh key: never, and nothing
				// is stored (no window starts, nothing to reset).
				{0, 4, Result{Allowed: false, Limit: 3, Remaining: 3, ResetAfter: 0, RetryAfter: Never}},
				// The window starts at this first counted hit.
				{0, 1, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second, CountedIn: ms(0)}},
				{100 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 900 * time.Millisecond, CountedIn: ms(0)}},
				{200 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 800 * time.Millisecond, CountedIn: ms(0)}},
				// Full: retry when the window ends, 1s after its start.
				{300 * time.Millisecond, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 700 * time.Millisecond, RetryAfter: 700 * time.Millisecond}},
				{300 * time.Millisecond, 4, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 700 * time.Millisecond, RetryAfter: Never}},
				// A new window at its end; the two rejections counted nothing.
				{time.Second, 1, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second, CountedIn: ms(time.Second)}},
				{1500 * time.Millisecond, 2, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 500 * time.Millisecond, CountedIn: ms(time.Second)}},
				// After a gap, the window starts at the hit, not on a grid.
				{2700 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second, CountedIn: ms(2700 * time.Millisecond)}},
			},
		},
		{
			name: "sliding window",
			rule: Rule{Algorithm: SlidingWindow, Max: 4, Expiration: time.Second},
			steps: []step{
				// A count in the current window matters for two windows.
				{0, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 2 * time.Second, CountedIn: ms(0)}},
				{100 * time.Millisecond, 3, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1900 * time.Millisecond, CountedIn: ms(0)}},
				// cur=4, prev=0. By hand: in the next window prev=4 and
				// 4*(1-e) + 1 <= 4 needs e >= 1/4, so 500ms to the window's
				// end + 250ms = 750ms.
				{500 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: 750 * time.Millisecond}},
				// Window 2 (start 1s), e=1/4: 4*3/4 + 0 + 1 = 4 <= 4. The
				// estimate's 3 leaves 4-1-3 = 0.
				{1250 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond, CountedIn: ms(time.Second)}},
				// By hand: 4*(1-e) + 1 + 1 <= 4 needs e >= 1/2: 250ms on.
				{1250 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond, RetryAfter: 250 * time.Millisecond}},
				// e=1/2: 4/2 + 1 + 1 = 4, admitted only because the rejection
				// above counted nothing.
				{1500 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1500 * time.Millisecond, CountedIn: ms(time.Second)}},
				{1500 * time.Millisecond, 5, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: Never}},
				// e=0.6, cur=2: 4*(1-e) + 3 <= 4 needs e >= 3/4: 150ms on.
				{1600 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1400 * time.Millisecond, RetryAfter: 150 * time.Millisecond}},
				// Window 3 (start 2s), prev=2, e=3/4: 2/4 + 1 = 1.5 <= 4;
				// remaining 4 - 1 - ceil(0.5) = 2.
				{2750 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 1250 * time.Millisecond, CountedIn: ms(2 * time.Second)}},
				// Two windows later everything is gone: a new window starts
				// at the hit, off the 1s grid.
				{5300 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 2 * time.Second, CountedIn: ms(5300 * time.Millisecond)}},
			},
		},
		{
			name: "token bucket",
			rule: Rule{Algorithm: TokenBucket, Max: 2, Burst: 4, Expiration: time.Second},
			steps: []step{
				// Capacity 4, refilled at 2/s: one token takes 500ms back.
				{0, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 500 * time.Millisecond}},
				{0, 3, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second}},
				{0, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second, RetryAfter: 500 * time.Millisecond}},
				// Half a token back: not enough, another 250ms.
				{250 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond, RetryAfter: 250 * time.Millisecond}},
				// One token back; the two rejections took nothing.
				{500 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second}},
				{500 * time.Millisecond, 5, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second, RetryAfter: Never}},
				// 1.25s later 2.5 tokens are back; taking 2 leaves half a
				// token (no whole request) and 3.5 owed = 1.75s.
				{1750 * time.Millisecond, 2, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond}},
				// Full again long after.
				{10 * time.Second, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 500 * time.Millisecond}},
			},
		},
		{
			name: "token bucket, Burst 0 means Limit",
			rule: Rule{Algorithm: TokenBucket, Max: 2, Expiration: time.Second},
			steps: []step{
				{0, 2, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Second}},
				{0, 1, Result{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: time.Second, RetryAfter: 500 * time.Millisecond}},
				{0, 3, Result{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: time.Second, RetryAfter: Never}},
			},
		},
		{
			name: "sliding window, cost above limit on a fresh key",
			rule: Rule{Algorithm: SlidingWindow, Max: 2, Expiration: time.Second},
			steps: []step{
				{0, 3, Result{Allowed: false, Limit: 2, Remaining: 2, RetryAfter: Never}},
				{0, 2, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * time.Second, CountedIn: ms(0)}},
			},
		},
		{
			name: "token bucket, cost above burst on a fresh key",
			rule: Rule{Algorithm: TokenBucket, Max: 10, Burst: 2, Expiration: time.Second},
			steps: []step{
				{0, 3, Result{Allowed: false, Limit: 2, Remaining: 2, RetryAfter: Never}},
				// Refill 10/s: two tokens are back in 200ms.
				{0, 2, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 200 * time.Millisecond}},
			},
		},
		{
			// 1s + 0.5ms counts as 1001ms: the window is rounded up to
			// whole ms.
			name: "fixed window, Window rounded up to whole ms",
			rule: Rule{Algorithm: FixedWindow, Max: 1, Expiration: time.Second + 500*time.Microsecond},
			steps: []step{
				{0, 1, Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 1001 * time.Millisecond, CountedIn: ms(0)}},
				{time.Second, 1, Result{Allowed: false, Limit: 1, Remaining: 0, ResetAfter: time.Millisecond, RetryAfter: time.Millisecond}},
				{1001 * time.Millisecond, 1, Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 1001 * time.Millisecond, CountedIn: ms(1001 * time.Millisecond)}},
			},
		},
		{
			// Times of a fraction of a millisecond are rounded up to the
			// next whole millisecond at which the request fits.
			name: "sliding window, whole-ms retry",
			rule: Rule{Algorithm: SlidingWindow, Max: 3, Expiration: 10 * time.Second},
			steps: []step{
				{0, 3, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 20 * time.Second, CountedIn: ms(0)}},
				// Next window, prev=3: 3*(1-e/10s) + 1 <= 3 needs
				// e >= 3333.33ms, so 3334ms: 10s + 3334ms.
				{0, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 20 * time.Second, RetryAfter: 13334 * time.Millisecond}},
				// e=3333ms: 3*0.6667 + 1 = 3.0001 > 3; 1ms on. Only prev
				// counts, until its window's end; remaining 3-ceil(2.0001).
				{13333 * time.Millisecond, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 6667 * time.Millisecond, RetryAfter: time.Millisecond}},
				// e=3334ms: 3*0.6666 + 1 = 2.9998 <= 3.
				{13334 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 16666 * time.Millisecond, CountedIn: ms(10 * time.Second)}},
			},
		},
		{
			// 3 per 10s: a token every 3333.33ms, waits rounded up to
			// whole ms.
			name: "token bucket, refill of a fraction of a token per ms",
			rule: Rule{Algorithm: TokenBucket, Max: 3, Expiration: 10 * time.Second},
			steps: []step{
				{0, 3, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 10 * time.Second}},
				{0, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 10 * time.Second, RetryAfter: 3334 * time.Millisecond}},
				// 0.9999 tokens back: 2.0001 owed = 6667ms (6666.33 rounded
				// up), the last 0.0001 in 1ms.
				{3333 * time.Millisecond, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 6667 * time.Millisecond, RetryAfter: time.Millisecond}},
				// 1.0002 back; taking 1 leaves 2.9998 owed = 9999.33ms, so
				// 10s.
				{3334 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 10 * time.Second}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			store, _, _ := newStore(t, c)
			ctx := context.Background()
			for i, s := range tt.steps {
				c.at(s.at)
				got, err := store.Take(ctx, "k", tt.rule, s.cost)
				require.NoError(t, err, "step %d", i)
				if tt.rule.Algorithm == TokenBucket && got.Allowed {
					// A bucket's CountedIn is when the request's cost will
					// have refilled: now + ResetAfter, rounded down to the ms.
					refilled := ms(s.at) + got.ResetAfter.Milliseconds()
					assert.Contains(t, []int64{refilled - 1, refilled}, got.CountedIn, "step %d", i)
					got.CountedIn = 0
				}
				assert.Equal(t, s.want, got, "step %d: cost %d at %v", i, s.cost, s.at)
			}
		})
	}
}

// Without WithClock the scripts read the server's TIME, in whole
// milliseconds, and the TTL is set from that same time.
func TestServerTime(t *testing.T) {
	store, rdb, _ := newStore(t, nil)
	ctx := context.Background()
	rule := Rule{Algorithm: FixedWindow, Max: 2, Expiration: 300 * time.Millisecond}
	var first Result
	for i := range 2 {
		r, err := store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed, "take %d", i)
		if i == 0 {
			first = r
		}
	}
	// CountedIn is the window's start, the server's time in ms; the key
	// expires exactly at the window's end. PEXPIRETIME (Redis 7) is
	// computed from the server's clock read again at the SET, within the
	// same script call, so it may be a millisecond later, rarely more.
	now := time.Now().UnixMilli()
	assert.InDelta(t, now, first.CountedIn, 5000, "CountedIn %d is the server's time in ms", first.CountedIn)
	if expireAt, err := rdb.Do(ctx, "PEXPIRETIME", "k").Int64(); err == nil {
		t.Logf("CountedIn %d, PEXPIRETIME %d", first.CountedIn, expireAt)
		assert.GreaterOrEqual(t, expireAt, first.CountedIn+300)
		assert.LessOrEqual(t, expireAt, first.CountedIn+300+5)
		v, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, [3]int64{first.CountedIn, 2, 0}, decodeState(t, v))
	} else {
		t.Logf("no PEXPIRETIME (Redis < 7): %v", err)
	}

	r, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.Positive(t, r.RetryAfter)
	require.LessOrEqual(t, r.RetryAfter, 300*time.Millisecond)
	require.Positive(t, r.ResetAfter)
	require.LessOrEqual(t, r.ResetAfter, 300*time.Millisecond)
	assert.Zero(t, r.RetryAfter%time.Millisecond, "RetryAfter %v is whole ms", r.RetryAfter)
	assert.Zero(t, r.ResetAfter%time.Millisecond, "ResetAfter %v is whole ms", r.ResetAfter)

	time.Sleep(r.RetryAfter + 5*time.Millisecond) // real server time must pass
	r, err = store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed, "allowed again after RetryAfter")
	assert.Equal(t, int64(1), r.Remaining, "a new window")
	assert.GreaterOrEqual(t, r.CountedIn, first.CountedIn+300)
}

// On the server's TIME, a take held off by a block or a gap is told to
// retry when it would be admitted, not when the hold ends: here the
// limit's own wait for the cost (1.5 s, the sliding window's 3 s) is
// longer than the hold (0.5 s). Waiting that long, the take is admitted.
func TestRetryAfterWhileHeldOnServerTime(t *testing.T) {
	store, _, _ := newStore(t, nil)
	const hold = 500 * time.Millisecond
	for _, a := range algorithms {
		for _, blocking := range []bool{true, false} {
			name := a.name + "/gap"
			if blocking {
				name = a.name + "/block"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				rule := Rule{Algorithm: a.alg, Max: 2, Expiration: 1500 * time.Millisecond, MinInterval: hold}
				if blocking {
					rule = Rule{Algorithm: a.alg, Max: 2, Expiration: 1500 * time.Millisecond, BlockFor: hold}
				}
				take := func(cost int64) Result {
					t.Helper()
					r, err := store.Take(ctx, name, rule, cost)
					require.NoError(t, err)
					return r
				}
				require.True(t, take(2).Allowed)
				if blocking {
					require.False(t, take(1).Allowed, "the limit is spent: a block starts")
				}
				r := take(2)
				require.False(t, r.Allowed)
				assert.Greater(t, r.RetryAfter, hold, "longer than the hold's rest: the limit's wait")
				time.Sleep(r.RetryAfter)
				assert.True(t, take(2).Allowed, "after RetryAfter %v", r.RetryAfter)
			})
		}
	}
}

func TestServerDown(t *testing.T) {
	server := redistest.Start(t)
	// No retries, so that each failing call is quick.
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	store := New(client).engine
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rule := Rule{Algorithm: FixedWindow, Max: 1, Expiration: time.Second}
	_, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)

	server.Stop()
	for _, a := range algorithms {
		rule := Rule{Algorithm: a.alg, Max: 1, Expiration: time.Second}
		var r Result
		require.NotPanics(t, func() { r, err = store.Take(ctx, "k", rule, 1) })
		require.Error(t, err, a.name)
		assert.True(t, strings.HasPrefix(err.Error(), "limiter: redis take"), "%v", err)
		assert.Equal(t, Result{}, r)
		require.NotPanics(t, func() { err = store.Refund(ctx, "k", rule, 1, 0) })
		require.Error(t, err, a.name)
		assert.True(t, strings.HasPrefix(err.Error(), "limiter: redis refund"), "%v", err)
	}
}
