package quota

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decideOne is the in-memory manager's path for a single limit: it must
// decide exactly as decideInto does, state and Result alike, for every
// algorithm it serves, from any state (plausible or not), at any time,
// for any cost.
func TestDecideOneIsDecideInto(t *testing.T) {
	rules := []rule{
		newRule(10, 10, time.Second, 10),
		newRule(3, 7, 250*time.Millisecond, 7),
		newRule(1_000_000, 1_000_000, time.Hour, 1_000_000),
		newRule(200_000_000, 200_000_000, 24*time.Hour, 200_000_000),
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		for _, r := range rules {
			ls := one(r)
			for range 20_000 {
				var sts [maxStates]state
				sts[0] = state{a: rnd.Int64N(4_000_000) - 1000, b: rnd.Int64N(2*r.max+2) - 1, c: uint32(rnd.IntN(3))}
				now := rnd.Int64N(4_000_000)
				cost := rnd.Int64N(r.burst + 2)
				want, got := sts, sts
				var wantRes, gotRes Result
				alg.decideInto(&wantRes, &want, nil, now, &ls, cost)
				alg.decideOne(&gotRes, &got[0], now, &ls.r[0], cost)
				require.Equal(t, want, got, "%v %+v state %+v now %d cost %d", alg, r, sts[0], now, cost)
				require.Equal(t, wantRes, gotRes, "%v %+v state %+v now %d cost %d", alg, r, sts[0], now, cost)
				// expiryAll's shortcut for one limit, against its loop.
				got[1] = state{a: rnd.Int64N(4_000_000) - 2_000_000, b: rnd.Int64N(4_000_000) - 2_000_000}
				loop := int64(0)
				for i := range ls.n {
					loop = max(loop, alg.expiry(got[i], ls.r[i])*ls.r[i].stepMillis())
				}
				require.Equal(t, max(loop, got[1].a, got[1].b), alg.expiryAll(&got, &ls))
			}
		}
	}
}
