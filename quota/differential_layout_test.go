package quota

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/require"
)

// A random trace in which each request comes from one of two versions of
// a limiter (of none, BlockFor, MinInterval or both: replicas in a rolling
// deploy) gives the same decisions from Redis and from a Storage, with
// refunds: each backend reads the values the other version wrote, and
// neither reads the other's value as "no state", nor its block or gap as
// counts. (On Redis a value of one rule's end does not say which rule's
// it is: read by a version of the other rule, or of both, after
// BlockFor's, it holds the key off for the shorter of the two at most, a
// case this test leaves out. The counts hold in every case: see
// TestRollingDeployTakesTurns.) Each trace plays once at times of any ms
// and once on a 10 ms grid, where the ends of blocks and gaps often fall
// on one ms.
func TestLayoutsMatchAcrossBackends(t *testing.T) {
	server := redistest.Start(t)
	pairs := [][2]int{{0, 1}, {0, 2}, {0, 3}, {2, 3}} // versions: bit 0 BlockFor, bit 1 MinInterval
	for _, alg := range allAlgorithms {
		for _, pair := range pairs {
			for _, grid := range []bool{false, true} {
				t.Run(alg.name()+"/"+strconv.Itoa(pair[0])+"-"+strconv.Itoa(pair[1])+"/grid="+strconv.FormatBool(grid), func(t *testing.T) {
					const base = int64(1_700_000_000_000)
					clock := &testClock{} // the trace's own: each run plays the same trace
					clock.now.Store(base)
					r := rule{max: 5, burst: 5, window: 2000}
					versions := make([]limits, 4)
					for i := range versions {
						versions[i] = one(r)
						if i&1 != 0 {
							versions[i].block = 300
						}
						if i&2 != 0 {
							versions[i].gap = 20
						}
					}
					backends := []backend{
						newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "layout:", clock.millis),
						newRedisBackend(server.Client(t), nil, alg, "layout:"+t.Name()+":", &Config{clock: clock.millis}),
					}
					rng := rand.New(rand.NewPCG(5, uint64(alg)))
					ctx := context.Background()
					admin := server.Client(t)
					held := map[string][]Result{}
					var admitted, refunds, blocked int
					for step := range 2000 {
						ms := rng.Int64N(40)
						if rng.IntN(20) == 0 {
							ms += rng.Int64N(600) // past a block, at times
						}
						if grid {
							ms -= ms % 10 // ends of blocks and gaps meet on one ms
						}
						clock.advance(time.Duration(ms) * time.Millisecond)
						key := "k" + strconv.Itoa(rng.IntN(3))
						// The Storage here keeps a value for good; Redis would
						// drop it by its TTL in real time, which the trace's
						// clock does not follow. Held longer, a value reads the
						// same (its times say what has ended), so Redis keeps it
						// for a minute too, and the trace plays alike on any
						// machine.
						require.NoError(t, admin.PExpire(ctx, "layout:"+t.Name()+":"+key, time.Minute).Err())
						ls := versions[pair[rng.IntN(2)]]
						if h := held[key]; len(h) > 0 && rng.IntN(5) == 0 {
							v := h[len(h)-1]
							held[key] = h[:len(h)-1]
							var answers [2]Result
							for i, b := range backends {
								got, err := b.adjust(ctx, key, &ls, 1, &v)
								require.NoError(t, err)
								answers[i] = got
							}
							require.Equal(t, answers[0], answers[1], "step %d: refund on %s by version %d", step, key, ls.block+ls.gap)
							refunds++
							continue
						}
						var answers [2]Result
						for i, b := range backends {
							got, err := b.take(ctx, key, &ls, 1)
							require.NoError(t, err)
							answers[i] = got
						}
						require.Equal(t, answers[0], answers[1], "step %d: take on %s by version block %d gap %d", step, key, ls.block, ls.gap)
						switch v := answers[0]; {
						case v.Allowed():
							admitted++
							held[key] = append(held[key], v)
						case v.RetryAfter() >= 100*time.Millisecond:
							blocked++
						}
					}
					require.Greater(t, admitted, 300)
					require.Greater(t, refunds, 50)
					if pair[1]&1 != 0 {
						require.Greater(t, blocked, 10)
					}
				})
			}
		}
	}
}

// A version of one rule writes the end of that rule alone, on Redis and on
// a Storage alike, even when it lands on the ms of another version's end
// it drops: two equal ends are how a key keeps an operator's hold, and a
// block it did not set must not turn into one. Here a MinInterval-only
// replica admits a take whose gap ends with the block a replica of both
// rules started; that replica then finds the gap alone on both backends,
// and its rejection there starts its block.
func TestLayoutsDropOtherEndsOnTheSameMs(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			const base = int64(1_700_000_000_000)
			clock := &testClock{}
			r := rule{max: 5, burst: 5, window: 60_000}
			both, gapOnly := one(r), one(r)
			both.block, both.gap, gapOnly.gap = 300, 20, 20
			backends := []backend{
				newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "ends:", clock.millis),
				newRedisBackend(server.Client(t), nil, alg, "ends:"+t.Name()+":", &Config{clock: clock.millis}),
			}
			ctx := context.Background()
			steps := []struct {
				at         int64
				ls         *limits
				allowed    bool
				retryAfter time.Duration
			}{
				{0, &both, true, 0},
				{10, &both, false, 300 * time.Millisecond},  // in the gap: the block runs to 310
				{290, &gapOnly, true, 0},                    // its gap ends at 310, with the block
				{300, &both, false, 300 * time.Millisecond}, // the gap alone: a new block
				{309, &gapOnly, false, time.Millisecond},    // in its own gap, to 310 on every store
			}
			for _, b := range backends {
				for i, s := range steps {
					clock.now.Store(base + s.at)
					v, err := b.take(ctx, "k", s.ls, 1)
					require.NoError(t, err)
					require.Equal(t, s.allowed, v.Allowed(), "%T step %d", b, i)
					require.Equal(t, s.retryAfter, v.RetryAfter(), "%T step %d", b, i)
				}
			}
		})
	}
}
