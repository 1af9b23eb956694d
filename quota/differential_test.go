package quota

import (
	"context"
	"github.com/fiberlimit/limiter/internal/timestep"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A random trace of (time, key, cost, refund) gives the same decisions from
// the in-memory manager and from Redis, with the client clock, for every
// algorithm.
func TestRedisMatchesMemory(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			clock := newTraceClock(1_700_000_000_000 + rand.Int64N(int64(time.Hour/time.Millisecond)))
			mem := testManager(alg, one(rule{max: 6, window: 100}), 1<<20, clock.millis)
			red := newRedisBackend(server.Client(t), nil, alg, "diff:", &Config{clock: clock.millis})
			rng := rand.New(rand.NewPCG(3, uint64(alg)))
			last := map[string]Decision{}
			ctx := context.Background()
			for i := range 4000 {
				clock.step(rng.Int64N(30))
				k := rng.IntN(12)
				key := "k" + strconv.Itoa(k)
				// Each key keeps its rule: a state is read with the rule it
				// was written under (a changed limit may be seen differently
				// by a state the manager has dropped and a key Redis still
				// holds until its TTL).
				r := rule{max: int64(3 + k%4), window: 100 * ms}
				r.burst = r.max
				if alg == TokenBucket {
					r.burst = 6
				}
				cost := int64(rng.IntN(4))
				if d, ok := last[key]; ok && rng.IntN(5) == 0 {
					require.NoError(t, refundRule(mem, ctx, key, r, 1, d))
					require.NoError(t, refundRule(red, ctx, key, r, 1, d))
					delete(last, key)
					continue
				}
				want, err := takeRule(mem, ctx, key, r, cost)
				require.NoError(t, err)
				got, err := takeRule(red, ctx, key, r, cost)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d key %s cost %d", i, key, cost)
				if want.Allowed && cost > 0 {
					last[key] = want
				}
			}
		})
	}
}

// A random trace of (time, key, cost, refund of an earlier admitted
// request) gives the same verdicts from the in-memory manager and from
// Redis with the client clock, under two and under three limits, for every
// algorithm: for each limit Allowed, Limit, Remaining, ResetAfter,
// RetryAfter and where the cost was counted. A cost above a limit, never
// admitted, is part of the trace; after each refund a cost-0 request shows
// what it left.
//
// The clock is a traceClock. (Redis keeping a key the manager dropped is a
// case the scripts must, and do, treat as the manager does.)
func TestLimitsMatchMemory(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name  string
		rules []rule
		burst []int64 // the token bucket's bursts, per rule: above and below the limit
		step  int64   // the most ms the clock advances per step, + 1
	}{
		{"two", []rule{{max: 3, window: 1000}, {max: 5, window: 10000}}, []int64{3, 8}, 400},
		{"three", []rule{{max: 2, window: 100}, {max: 4, window: 1000}, {max: 7, window: 5000}}, []int64{3, 6, 7}, 150},
	}
	for _, alg := range allAlgorithms {
		for _, c := range cases {
			t.Run(alg.name()+"/"+c.name, func(t *testing.T) {
				ls := limits{n: len(c.rules)}
				for i, r := range c.rules {
					r.burst = r.max
					if alg == TokenBucket {
						r.burst = c.burst[i]
					}
					ls.r[i] = r
				}
				const base = int64(1_700_000_000_000)
				clock := newTraceClock(base)
				mem := testManager(alg, ls, 1<<20, clock.millis)
				red := newRedisBackend(server.Client(t), nil, alg, "limits-diff:"+alg.name()+":"+c.name+":", &Config{clock: clock.millis})
				rng := rand.New(rand.NewPCG(7, uint64(alg)<<8|uint64(ls.n)))
				type taken struct {
					v    Result
					cost int64
				}
				held := map[string][]taken{} // admitted requests not yet refunded
				var admitted, rejected, never, refunds int
				ctx := context.Background()
				compare := func(step int, key string, cost int64) Result {
					t.Helper()
					want, err := mem.take(ctx, key, &ls, cost)
					require.NoError(t, err)
					got, err := red.take(ctx, key, &ls, cost)
					require.NoError(t, err)
					require.Equal(t, want, got, "step %d: key %s cost %d at %d ms", step, key, cost, clock.millis()-base)
					return want
				}
				for step := range 500 {
					clock.step(rng.Int64N(c.step))
					key := "k" + strconv.Itoa(rng.IntN(5))
					if h := held[key]; len(h) > 0 && rng.IntN(6) == 0 {
						j := rng.IntN(len(h))
						want, err := mem.adjust(ctx, key, &ls, h[j].cost, &h[j].v)
						require.NoError(t, err)
						got, err := red.adjust(ctx, key, &ls, h[j].cost, &h[j].v)
						require.NoError(t, err)
						require.Equal(t, want, got, "step %d: the state a refund on key %s leaves", step, key)
						held[key] = slices.Delete(h, j, j+1)
						refunds++
						compare(step, key, 0)
						continue
					}
					cost := int64(rng.IntN(5))
					v := compare(step, key, cost)
					switch {
					case v.Allowed():
						admitted++
						if cost > 0 {
							held[key] = append(held[key], taken{v, cost})
						}
					case v.RetryAfter() == Never:
						never++
					default:
						rejected++
					}
				}
				t.Logf("%d admitted, %d rejected, %d never admissible, %d refunds, over %d ms",
					admitted, rejected, never, refunds, clock.millis()-base)
				// The trace is worth something only if it went everywhere.
				assert.Positive(t, admitted)
				assert.Positive(t, rejected)
				assert.Positive(t, never)
				assert.Positive(t, refunds)
			})
		}
	}
}

// A state kept from a larger Max or Burst (lowered by a deploy, or by
// MaxFunc per request) reads as the whole quota spent, in memory and in
// Redis alike: a random trace whose limit and burst change from request to
// request gives the same decisions from both.
func TestRedisMatchesMemoryAsLimitsChange(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			clock := newTraceClock(1_700_000_000_000)
			mem := testManager(alg, one(rule{max: 8, window: 200}), 1<<20, clock.millis)
			red := newRedisBackend(server.Client(t), nil, alg, "change:", &Config{clock: clock.millis})
			rng := rand.New(rand.NewPCG(7, uint64(alg)))
			ctx := context.Background()
			spent := 0
			for i := range 4000 {
				clock.step(rng.Int64N(40))
				k := rng.IntN(6)
				key := "k" + strconv.Itoa(k)
				r := rule{max: int64(1 + rng.IntN(8)), window: 200 * ms}
				r.burst = r.max
				if alg == TokenBucket {
					// A bucket's state ends when its debt has refilled at
					// its rate: a key keeps its rate, so that the manager and
					// Redis (by its TTL, in its own time) end it alike.
					r.max, r.burst = int64(2+k%3), int64(1+rng.IntN(10))
				}
				cost := int64(rng.IntN(3))
				want, err := takeRule(mem, ctx, key, r, cost)
				require.NoError(t, err)
				got, err := takeRule(red, ctx, key, r, cost)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d key %s rule %+v cost %d", i, key, r, cost)
				if !want.Allowed && want.Remaining == 0 && want.RetryAfter <= r.span(r.window) {
					spent++
				}
			}
			assert.Greater(t, spent, 100, "the trace rarely found a quota spent")
		})
	}
}

// A state written in other time steps (the same key decided under another
// rule, or a value from elsewhere) lies far ahead of now in this rule's
// steps: it reads as no state, and cannot lock the key out for its
// decades.
func TestStateFromOtherStepsIsNoState(t *testing.T) {
	store := redisengine.Open(redistest.Start(t).Client(t), nil)
	ctx := context.Background()
	day := 24 * time.Hour
	first := redisengine.Rule{Algorithm: redisengine.FixedWindow, Max: 100_000_000, Expiration: day}  // 4 ms steps
	second := redisengine.Rule{Algorithm: redisengine.FixedWindow, Max: 200_000_000, Expiration: day} // 8 ms steps
	r, err := store.Take(ctx, "k", first, 100_000_000)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = store.Take(ctx, "k", second, 200_000_000)
	require.NoError(t, err)
	assert.True(t, r.Allowed, "the 4 ms state, read in 8 ms steps, is not a state of this rule")
	r, err = store.Take(ctx, "k", second, 1)
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	assert.LessOrEqual(t, r.RetryAfter, day, "a day's wait, not decades")

	// The in-memory twin reads such a state the same way.
	ls := one(newRule(200_000_000, 200_000_000, day, 200_000_000))
	sts := [maxStates]state{{a: 1 << 46, b: 200_000_000}}
	v := FixedWindow.decide(&sts, nil, 1<<40, &ls, 1)
	assert.True(t, v.Allowed())
}

// FuzzQuota: for any Max below 2^32, any Expiration from 1 ms to the
// longest Duration, any cost, and takes at any time of the window, each
// algorithm decides without overflow: Remaining in [0, Limit], durations
// not negative, a cost above the quota never admitted and anything up to it
// admitted on a fresh key, with exactly quota - cost left.
func FuzzQuota(f *testing.F) {
	f.Add(uint32(5), int64(time.Minute), uint32(1), uint16(0))
	f.Add(uint32(math.MaxUint32), int64(math.MaxInt64), uint32(math.MaxUint32), uint16(65535))
	f.Add(uint32(2_000_000_000), int64(365*24*time.Hour), uint32(7), uint16(3))
	f.Fuzz(func(t *testing.T, maxQ uint32, expNS int64, cost uint32, at uint16) {
		if maxQ == 0 {
			maxQ = 1
		}
		exp := time.Duration(max(expNS, int64(time.Millisecond))) // 1 ms to the longest Duration
		for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
			cfg := Config{Limits: []Limit{{Max: int(maxQ), Expiration: exp}}}
			ls := limitsOf(&cfg)
			r := ls.r[0]
			quota := capacity(alg, r)
			var sts [maxStates]state
			now := int64(at) * (timestep.Millis(exp)/65536 + 1)
			v := alg.decide(&sts, nil, now, &ls, int64(cost))
			d := v.each[0]
			require.Equal(t, int64(cost) <= quota, d.Allowed, "cost %d, quota %d", cost, quota)
			require.Equal(t, int64(cost) > quota, d.RetryAfter == Never)
			if d.Allowed {
				require.Equal(t, quota-int64(cost), int64(d.Remaining))
			}
			for _, later := range []int64{now + 1, now + timestep.Millis(exp)/2, now + timestep.Millis(exp), now + 2*timestep.Millis(exp)} {
				v = alg.decide(&sts, nil, later, &ls, 1)
				for _, d := range v.each[:1] {
					require.GreaterOrEqual(t, d.Remaining, 0)
					require.LessOrEqual(t, int64(d.Remaining), quota)
					require.GreaterOrEqual(t, d.ResetAfter, time.Duration(0))
					require.GreaterOrEqual(t, d.RetryAfter, time.Duration(0))
				}
			}
			require.GreaterOrEqual(t, policyWindow(alg, r), exp.Truncate(time.Millisecond))
		}
	})
}
