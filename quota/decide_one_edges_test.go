package quota

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decideOne against decideInto at the edges the random test does not
// reach: states far behind and ahead of now, negative and huge counts,
// every c, costs of 0, at and past the limit, and up to MaxInt64.
func TestDecideOneAtTheEdges(t *testing.T) {
	rules := []rule{
		newRule(1, 1, time.Millisecond, 1),
		newRule(10, 10, time.Second, 10),
		newRule(3, 7, 250*time.Millisecond, 7),
		newRule(maxLimit, maxLimit, 24*time.Hour, maxLimit),
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		for _, r := range rules {
			ls := one(r)
			for _, now := range []int64{0, 1, 999, 86_400_000, 1 << 40} {
				at := r.at(now)
				times := []int64{math.MinInt64, -1, 0, at - r.window - 1, at - r.window, at - 1, at, at + 1,
					at + r.window, at + r.window + 1, at + 60_001, 1 << 50, math.MaxInt64}
				counts := []int64{math.MinInt64, -1, 0, 1, r.max - 1, r.max, r.max + 1, r.burst, r.burst + 1, 1 << 40, math.MaxInt64}
				costs := []int64{0, 1, r.max, r.max + 1, r.burst, r.burst + 1, maxLimit, math.MaxInt64}
				for _, a := range times {
					for _, b := range counts {
						for _, c := range []uint32{0, 1, 2, math.MaxUint32} {
							for _, cost := range costs {
								var sts [maxStates]state
								sts[0] = state{a: a, b: b, c: c}
								sts[1] = state{a: now + 5, b: now + 7} // another version's ends
								want, got := sts, sts
								var wantRes, gotRes Result
								alg.decideInto(&wantRes, &want, nil, now, &ls, cost)
								alg.decideOne(&gotRes, &got[0], now, &ls.r[0], cost)
								require.Equal(t, want, got, "%v %+v state %+v now %d cost %d", alg, r, sts[0], now, cost)
								require.Equal(t, wantRes, gotRes, "%v %+v state %+v now %d cost %d", alg, r, sts[0], now, cost)
								exp := int64(0)
								for i := range ls.n {
									exp = max(exp, alg.expiry(got[i], ls.r[i])*ls.r[i].stepMillis())
								}
								require.Equal(t, max(exp, got[ls.n].a, got[ls.n].b), alg.expiryAll(&got, &ls))
							}
						}
					}
				}
			}
		}
	}
}

// The manager's shortcut is never taken under SlidingLog: decideOne would
// decide it as a token bucket. Every SlidingLog manager keeps logs.
func TestSlidingLogManagerKeepsLogs(t *testing.T) {
	ls := one(newRule(1, 1, time.Second, 1))
	m := testManager(SlidingLog, ls, 1024, func() int64 { return 0 })
	for i := range m.shards {
		require.Positive(t, m.shards[i].logStride)
	}
}

// finish's shortcut gives each Result the Window the loop gave it: the
// configured limit's through Take, the varied one's through TakeWith
// (MaxFunc and ExpirationFunc), for every algorithm.
func TestFinishWindow(t *testing.T) {
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		cfg := Config{Algorithm: alg, Limits: []Limit{{Max: 10, Burst: burstFor(alg, 20), Expiration: time.Minute}}, VaryMax: alg != SlidingLog, VaryExpiration: alg != SlidingLog}
		l, err := New(cfg)
		require.NoError(t, err)
		var res Result
		require.NoError(t, l.TakeInto(ctx, "k", 1, &res))
		require.Equal(t, 1, len(res.Decisions()))
		require.Equal(t, policyWindow(alg, l.base.r[0]), res.Decisions()[0].Window, "%v", alg)
		if alg == SlidingLog {
			continue // SlidingLog varies nothing
		}
		varied := Limit{Max: 5, Expiration: time.Hour}
		got, err := l.TakeWith(ctx, "k", 1, varied)
		require.NoError(t, err)
		ls, err := l.varied(varied)
		require.NoError(t, err)
		require.Equal(t, policyWindow(alg, ls.r[0]), got.Decisions()[0].Window, "%v", alg)
	}
}

func burstFor(alg Algorithm, burst int) int {
	if alg == TokenBucket {
		return burst
	}
	return 0
}
