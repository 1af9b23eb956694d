package redis

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertStoreError checks an error of the Go-side validation.
func assertStoreError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "limiter: redis"), "%v", err)
}

// Limit*Window in ms (with the window rounded up, and Burst for the bucket)
// must be at most 2^51, where the scripts' doubles stay exact; beyond it
// Take and Refund fail and write nothing. Beyond what 1 ms steps carry,
// without a Step given, a rule is decided in coarser steps, and works.
func TestRuleTooLarge(t *testing.T) {
	const big = int64(1) << 31 // 2^31 * 2^20 ms = 2^51 exactly
	w := (1 << 20) * time.Millisecond
	const milli = time.Millisecond
	tooLarge := []struct {
		name string
		rule Rule
	}{
		// With a Step of 1 ms given, limit × window must fit at that step.
		{"fixed 2^31+1 per 2^20 ms at 1 ms", Rule{Algorithm: FixedWindow, Max: big + 1, Expiration: w, Step: milli}},
		{"sliding 2^31+1 per 2^20 ms at 1 ms", Rule{Algorithm: SlidingWindow, Max: big + 1, Expiration: w, Step: milli}},
		{"bucket 2^31+1 per 2^20 ms at 1 ms", Rule{Algorithm: TokenBucket, Max: big + 1, Expiration: w, Step: milli}},
		{"bucket Burst 2^31+1 at 1 ms", Rule{Algorithm: TokenBucket, Max: 1, Burst: big + 1, Expiration: w, Step: milli}},
		// 2^20 ms + 1ns is rounded up to 2^20 + 1 ms.
		{"window rounded up past the bound at 1 ms", Rule{Algorithm: FixedWindow, Max: big, Expiration: w + 1, Step: milli}},
		// A count must fit its 4 bytes, whatever the step.
		{"2^32 per ms", Rule{Algorithm: FixedWindow, Max: 1 << 32, Expiration: time.Millisecond}},
		{"bucket Burst 2^32", Rule{Algorithm: TokenBucket, Max: 1, Burst: 1 << 32, Expiration: time.Hour}},
	}
	valid := []struct {
		name string
		rule Rule
	}{
		{"fixed 2^31 per 2^20 ms", Rule{Algorithm: FixedWindow, Max: big, Expiration: w}},
		{"sliding 2^31 per 2^20 ms", Rule{Algorithm: SlidingWindow, Max: big, Expiration: w}},
		{"bucket 2^31 per 2^20 ms", Rule{Algorithm: TokenBucket, Max: big, Expiration: w}},
		// 2^20 - 1 ms + 1ns is rounded up to 2^20 ms.
		{"window rounded up to the bound", Rule{Algorithm: FixedWindow, Max: big, Expiration: w - time.Millisecond + 1}},
		// The windows ignore Burst.
		{"fixed with a huge Burst", Rule{Algorithm: FixedWindow, Max: 1, Burst: 1 << 62, Expiration: w}},
		// Beyond the bound at 1 ms, a coarser step (Step 0 picks it).
		{"fixed 2^31+1 per 2^20 ms", Rule{Algorithm: FixedWindow, Max: big + 1, Expiration: w}},
		{"bucket 2^31+1 per 2^20 ms", Rule{Algorithm: TokenBucket, Max: big + 1, Expiration: w}},
		{"1e9 per 30 days", Rule{Algorithm: SlidingWindow, Max: 1_000_000_000, Expiration: 30 * 24 * time.Hour}},
		{"400 per 2e6 hours", Rule{Algorithm: FixedWindow, Max: 400, Expiration: 2_000_000 * time.Hour}},
		{"2^32-1 per the longest Duration", Rule{Algorithm: TokenBucket, Max: 1<<32 - 1, Expiration: time.Duration(math.MaxInt64)}},
	}

	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	for _, tt := range tooLarge {
		lim := max(tt.rule.Max, tt.rule.Burst)
		require.True(t, lim >= 1<<32 || float64(lim)*float64((tt.rule.Expiration+time.Millisecond-1)/time.Millisecond) > float64(int64(1)<<51), tt.name)
		require.True(t, lim >= 1<<32 || tt.rule.Step == time.Millisecond, tt.name)
		t.Run(tt.name, func(t *testing.T) {
			// On a key with state: the state stays as it was.
			good := Rule{Algorithm: tt.rule.Algorithm, Max: 5, Expiration: time.Second}
			key := "state:" + tt.name
			r, err := store.Take(ctx, key, good, 2)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			before, err := rdb.Get(ctx, key).Result()
			require.NoError(t, err)

			for _, k := range []string{key, "fresh:" + tt.name} {
				r, err := store.Take(ctx, k, tt.rule, 1)
				assertStoreError(t, err)
				assert.Regexp(t, "too large|too fine", err.Error())
				assert.Equal(t, Result{}, r)
				assertStoreError(t, store.Refund(ctx, k, tt.rule, 1, r.CountedIn))
			}
			after, err := rdb.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, before, after)
			n, err := rdb.Exists(ctx, "fresh:"+tt.name).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "nothing written")
		})
	}
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(len(tooLarge)), n, "only the valid rules' keys")

	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			r, err := store.Take(ctx, "valid:"+tt.name, tt.rule, tt.rule.Max)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.Zero(t, r.Remaining)
			r, err = store.Take(ctx, "valid:"+tt.name, tt.rule, 1)
			require.NoError(t, err)
			assert.False(t, r.Allowed)
		})
	}

	// At the bound the arithmetic is still exact, to the unit and the ms.
	t.Run("exact at the bound", func(t *testing.T) {
		for _, a := range algorithms {
			if a.alg == SlidingLog {
				continue // a log's Limit is at most MaxLogLimit
			}
			t.Run(a.name, func(t *testing.T) {
				c := newClock()
				store, rdb, _ := newStore(t, c)
				rule := Rule{Algorithm: a.alg, Max: big, Expiration: w}
				r, err := store.Take(ctx, "k", rule, big)
				require.NoError(t, err)
				require.True(t, r.Allowed)
				if a.alg == SlidingWindow {
					assert.Equal(t, 2*w, r.ResetAfter)
				} else {
					assert.Equal(t, w, r.ResetAfter)
				}
				r, err = store.Take(ctx, "k", rule, 1)
				require.NoError(t, err)
				require.False(t, r.Allowed)
				switch a.alg {
				case FixedWindow:
					assert.Equal(t, [3]int64{ms(0), big, 0}, stateOf(t, rdb, "k"))
					assert.Equal(t, w, r.RetryAfter)
					c.at(w - time.Millisecond)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.False(t, r.Allowed)
					c.at(w)
					r, err = store.Take(ctx, "k", rule, big)
					require.NoError(t, err)
					assert.True(t, r.Allowed)
					assert.Equal(t, [3]int64{ms(w), big, 0}, stateOf(t, rdb, "k"))
				case SlidingWindow:
					assert.Equal(t, [3]int64{ms(0), big, 0}, stateOf(t, rdb, "k"))
					// In the next window prev=2^31 weighs 2^31*(1-e/2^20 ms):
					// one unit frees at e = 2^-11 ms, so at 1ms.
					assert.Equal(t, w+time.Millisecond, r.RetryAfter)
					c.at(w)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.False(t, r.Allowed)
					c.at(w + time.Millisecond)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.True(t, r.Allowed)
					// 2^31 - 1 - ceil(2^31*(2^20-1)/2^20) = 2^11 - 1.
					assert.Equal(t, int64(1)<<11-1, r.Remaining)
					assert.Equal(t, [3]int64{ms(w), 1, big}, stateOf(t, rdb, "k"))
				case TokenBucket:
					assert.Equal(t, [3]int64{ms(0), 1 << 51, 0}, stateOf(t, rdb, "k"))
					// 2^31 tokens per 2^20 ms: 2^31 of debt refill a ms, and
					// a unit costs 2^20 of debt, so 1ms.
					assert.Equal(t, time.Millisecond, r.RetryAfter)
					c.at(time.Millisecond)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.True(t, r.Allowed)
					assert.Equal(t, int64(1)<<11-1, r.Remaining)
					assert.Equal(t, w, r.ResetAfter)
					assert.Equal(t, [3]int64{ms(time.Millisecond), 1<<51 - 1<<31 + 1<<20, 0}, stateOf(t, rdb, "k"))
				}
			})
		}
	})
}

// Large but valid rules are exact: with the client clock standing still,
// exactly Limit units are admitted, from concurrent Takes.
func TestLargeRulesExact(t *testing.T) {
	tests := []struct {
		name  string
		rule  Rule
		first int64 // cost of a first Take, before the cost-1 Takes
	}{
		// Limit+5 cost-1 Takes would be 100,005 round trips; one Take of
		// Limit-10 and then 15 of cost 1 meet the limit the same way.
		{"100000 per 24h", Rule{Max: 100_000, Expiration: 24 * time.Hour}, 100_000 - 10},
		// Small enough to take one by one: Limit+5 Takes of cost 1.
		{"2000 per 14 days", Rule{Max: 2000, Expiration: 14 * 24 * time.Hour}, 0},
	}
	for _, tt := range tests {
		require.LessOrEqual(t, tt.rule.Max*tt.rule.Expiration.Milliseconds(), int64(1)<<51, tt.name)
		for _, a := range algorithms {
			if a.alg == SlidingLog && tt.rule.Max > MaxLogLimit {
				continue
			}
			t.Run(tt.name+"/"+a.name, func(t *testing.T) {
				rule := tt.rule
				rule.Algorithm = a.alg
				c := newClock()
				server := redistest.Start(t)
				store := New(goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 8}), WithClock(c.now)).engine
				t.Cleanup(func() { _ = store.Conn().Close() })
				ctx := context.Background()

				admitted := int64(0)
				if tt.first > 0 {
					r, err := store.Take(ctx, "k", rule, tt.first)
					require.NoError(t, err)
					require.True(t, r.Allowed)
					assert.Equal(t, rule.Max-tt.first, r.Remaining)
					admitted = tt.first
				}
				// The clock stands still: of the cost-1 Takes, taken from 8
				// goroutines at once, exactly as many pass as the limit has
				// left, and then Remaining is 0.
				var next, n atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				takes := rule.Max - admitted + 5
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= takes {
							r, err := store.Take(ctx, "k", rule, 1)
							if err != nil {
								errs <- err
								return
							}
							if r.Allowed {
								n.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.Equal(t, rule.Max, admitted+n.Load())

				// 1.5ms later, at a time with a sub-millisecond part: base
				// is at .456789ms, so the millisecond changes once.
				c.at(1500 * time.Microsecond)
				r, err := store.Take(ctx, "k", rule, 1)
				require.NoError(t, err)
				assert.False(t, r.Allowed)
				assert.Zero(t, r.Remaining)
				assert.Zero(t, r.ResetAfter%time.Millisecond, "ResetAfter %v", r.ResetAfter)
				assert.Zero(t, r.RetryAfter%time.Millisecond, "RetryAfter %v", r.RetryAfter)
				// One unit comes back every Window/Limit (864ms and
				// 604.8s), exactly.
				perUnit := rule.Expiration / time.Duration(rule.Max)
				switch a.alg {
				case FixedWindow:
					assert.Equal(t, rule.Expiration-time.Millisecond, r.ResetAfter)
					assert.Equal(t, r.ResetAfter, r.RetryAfter)
				case SlidingWindow:
					// In the next window prev=Limit frees one unit after
					// Window/Limit.
					assert.Equal(t, 2*rule.Expiration-time.Millisecond, r.ResetAfter)
					assert.Equal(t, rule.Expiration-time.Millisecond+perUnit, r.RetryAfter)
				case TokenBucket:
					assert.Equal(t, rule.Expiration-time.Millisecond, r.ResetAfter)
					assert.Equal(t, perUnit-time.Millisecond, r.RetryAfter)
				}
			})
		}
	}
}

// A client clock with a sub-millisecond part counts as its whole
// millisecond: a store whose clock is truncated to the ms decides the same,
// and stores the same state. (Windows are seconds long: with the client
// clock frozen, Redis still expires keys in real time.)
func TestSubMillisecondClock(t *testing.T) {
	// base is at .456789ms: edge(k) is the first instant of the k-th
	// millisecond after base's, edge(k)-1 the last of the one before.
	edge := func(k int64) time.Duration { return time.Duration(k)*time.Millisecond - 456_789 }

	t.Run("fixed window", func(t *testing.T) {
		c := newClock()
		store, _, _ := newStore(t, c)
		ctx := context.Background()
		rule := Rule{Algorithm: FixedWindow, Max: 1, Expiration: time.Second}
		r, err := store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 1, ResetAfter: time.Second, CountedIn: base.UnixMilli()}, r)
		// Later in the same millisecond: a full second to go.
		c.at(edge(1) - 1)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: false, Limit: 1, ResetAfter: time.Second, RetryAfter: time.Second}, r)
		c.at(edge(1))
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: false, Limit: 1, ResetAfter: 999 * time.Millisecond, RetryAfter: 999 * time.Millisecond}, r)
		// The window ends at the millisecond base's + 1000, 0.456789ms
		// before base + 1s.
		c.at(edge(1000) - 1)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: false, Limit: 1, ResetAfter: time.Millisecond, RetryAfter: time.Millisecond}, r)
		c.at(edge(1000))
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 1, ResetAfter: time.Second, CountedIn: base.UnixMilli() + 1000}, r)
	})

	steps := []struct {
		at   time.Duration
		cost int64
	}{
		{0, 1}, {edge(1) - 1, 2}, {edge(1), 1}, {edge(2500), 1}, {edge(5000) - 1, 2},
		{edge(5000), 1}, {edge(10000) - 1, 1}, {edge(10000), 2}, {edge(12345) + 123, 1},
		{edge(15000) - 1, 3}, {edge(20000), 1}, {edge(20001) - 1, 1}, {edge(27700), 2},
		{edge(31000), 1}, {edge(31001) - 1, 1}, {edge(55555) + 1000, 2},
	}
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			server := redistest.Start(t)
			rdb := server.Client(t)
			fine := New(server.Client(t), WithClock(c.now)).engine
			whole := New(server.Client(t), WithClock(func() time.Time { return time.UnixMilli(c.now().UnixMilli()) })).engine
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Max: 4, Burst: 5, Expiration: 10 * time.Second}
			allowed := 0
			for i, s := range steps {
				c.at(s.at)
				got, err := fine.Take(ctx, "fine", rule, s.cost)
				require.NoError(t, err)
				want, err := whole.Take(ctx, "whole", rule, s.cost)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d: cost %d at %v", i, s.cost, s.at)
				if got.Allowed {
					allowed++
				}
				exists, err := rdb.Exists(ctx, "fine", "whole").Result()
				require.NoError(t, err)
				if exists == 2 {
					assert.Equal(t, rdb.Get(ctx, "whole").Val(), rdb.Get(ctx, "fine").Val(), "step %d", i)
				} else {
					assert.Zero(t, exists, "step %d: both stored or neither", i)
				}
			}
			t.Logf("%d of %d admitted", allowed, len(steps))
			assert.Positive(t, allowed)
			assert.Less(t, allowed, len(steps), "some rejected")
		})
	}
}

func TestInvalidRule(t *testing.T) {
	store, rdb, _ := newStore(t, nil)
	ctx := context.Background()
	tests := []struct {
		name string
		rule Rule
	}{
		{"algorithm 0", Rule{Max: 1, Expiration: time.Second}},
		{"algorithm 5", Rule{Algorithm: SlidingLog + 1, Max: 1, Expiration: time.Second}},
		{"a log of 10001", Rule{Algorithm: SlidingLog, Max: MaxLogLimit + 1, Expiration: time.Second}},
		{"limit 0", Rule{Algorithm: FixedWindow, Expiration: time.Second}},
		{"limit -1", Rule{Algorithm: SlidingWindow, Max: -1, Expiration: time.Second}},
		{"window 0", Rule{Algorithm: TokenBucket, Max: 1}},
		{"window -1s", Rule{Algorithm: TokenBucket, Max: 1, Expiration: -time.Second}},
		{"window of 1ms less 1ns", Rule{Algorithm: FixedWindow, Max: 1, Expiration: time.Millisecond - 1}},
		{"window of 1ns", Rule{Algorithm: SlidingWindow, Max: 1, Expiration: 1}},
		{"limit × window above 2^51", Rule{Algorithm: FixedWindow, Max: 1 << 40, Expiration: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := store.Take(ctx, "k", tt.rule, 1)
			assertStoreError(t, err)
			assert.Equal(t, Result{}, r)
			assertStoreError(t, store.Refund(ctx, "k", tt.rule, 1, 0))
		})
	}
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was written")

	// The smallest valid window works.
	r, err := store.Take(ctx, "k", Rule{Algorithm: FixedWindow, Max: 1, Expiration: time.Millisecond}, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
}

// A negative cost is an error for Take and Refund, and changes nothing: it

// Extreme costs and countedIn values, which the request's packed form clamps
// (a cost to quota+1, countedIn to [0, 2^56)), decide as the unclamped
// values would: a cost above the quota is never admitted and writes
// nothing, a refund of a huge cost empties the key's count, and a countedIn
// no script returned credits nothing in a window.
func TestExtremeCostAndCountedIn(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Max: 3, Expiration: time.Second}

			for _, cost := range []int64{4, 1 << 32, 1<<63 - 1} {
				r, err := store.Take(ctx, "k", rule, cost)
				require.NoError(t, err)
				assert.False(t, r.Allowed, "cost %d", cost)
				assert.Equal(t, Never, r.RetryAfter, "cost %d", cost)
				assert.Equal(t, int64(3), r.Remaining, "cost %d", cost)
			}
			n, err := rdb.Exists(ctx, "k").Result()
			require.NoError(t, err)
			assert.Zero(t, n, "a rejected cost writes nothing")

			r, err := store.Take(ctx, "k", rule, 3)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			for _, countedIn := range []int64{-1, -1 << 63, 1<<63 - 1} {
				require.NoError(t, store.Refund(ctx, "k", rule, 1, countedIn))
			}
			r2, err := store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			if a.alg == TokenBucket {
				// A countedIn far in the future says the cost has not
				// refilled: its refund credits it.
				assert.True(t, r2.Allowed, "the far-future refund credited one token")
			} else {
				assert.False(t, r2.Allowed, "no window matched: nothing credited")
			}
			if r2.Allowed {
				require.NoError(t, store.Refund(ctx, "k", rule, 1, r2.CountedIn))
			}

			require.NoError(t, store.Refund(ctx, "k", rule, 1<<63-1, r.CountedIn))
			r, err = store.Take(ctx, "k", rule, 3)
			require.NoError(t, err)
			assert.True(t, r.Allowed, "a refund of a huge cost gave the whole quota back")
		})
	}
}

// would otherwise credit units a Take never took.
func TestNegativeCost(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Max: 3, Expiration: time.Second}
			r, err := store.Take(ctx, "k", rule, 3)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			counted := r.CountedIn
			before, err := rdb.Get(ctx, "k").Result()
			require.NoError(t, err)

			for _, cost := range []int64{-1, -3, -1 << 62} {
				for _, key := range []string{"k", "fresh"} {
					r, err := store.Take(ctx, key, rule, cost)
					assertStoreError(t, err)
					assert.Contains(t, err.Error(), "negative")
					assert.Equal(t, Result{}, r)
					err = store.Refund(ctx, key, rule, cost, counted)
					assertStoreError(t, err)
					assert.Contains(t, err.Error(), "negative")
				}
			}
			after, err := rdb.Get(ctx, "k").Result()
			require.NoError(t, err)
			assert.Equal(t, before, after, "state unchanged")
			n, err := rdb.DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "nothing written for the fresh key")
			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			assert.False(t, r.Allowed, "still full")
		})
	}
}

// A call decides at most MaxRules (7) rules: the answer's first byte holds
// the admission and one "never" flag per rule, the 7th rule's in its top
// bit. An 8th rule is refused before anything is sent.
func TestMaxRules(t *testing.T) {
	store, _, _ := newStore(t, newClock())
	ctx := context.Background()
	rules := make([]Rule, redisengine.MaxRules+1)
	for i := range rules {
		rules[i] = Rule{Algorithm: FixedWindow, Max: int64(10 - i), Expiration: time.Duration(i+1) * time.Minute}
	}
	results := make([]Result, len(rules))
	_, err := store.TakeAll(ctx, "k", rules, 1, results)
	require.ErrorContains(t, err, "limiter: redis take: 8 rules; give 1 to 7")

	rules = rules[:redisengine.MaxRules]
	allowed, err := store.TakeAll(ctx, "k", rules, 4, results)
	require.NoError(t, err)
	require.True(t, allowed)
	allowed, err = store.TakeAll(ctx, "k", rules, 5, results)
	require.NoError(t, err)
	require.False(t, allowed, "the 7th rule's limit is 4")
	for i, r := range results[:6] {
		assert.NotEqual(t, Never, r.RetryAfter, "rule %d can admit 5 later", i)
	}
	assert.Equal(t, Never, results[6].RetryAfter, "the 7th rule, whose limit is 4, never admits 5")
}
