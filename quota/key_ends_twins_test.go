package quota

import (
	"context"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// endsStep is one call of a trace that storesAgree plays: at ms after the
// trace's start, a take of cost under ls, or with refund, the refund of
// the take of step refundOf.
type endsStep struct {
	at       int64
	ls       *limits
	cost     int64
	refund   bool
	refundOf int
}

// blockingStore is what the tests here call on every store, the in-memory
// manager's included: takes and an operator's Block.
type blockingStore interface {
	take(ctx context.Context, key string, ls *limits, cost int64) (Result, error)
	block(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error)
}

// storesAgree plays steps on a Storage and on Redis, each at the trace's
// own clock, and requires the same answers step by step.
func storesAgree(t *testing.T, server *redistest.Server, alg Algorithm, steps []endsStep) {
	t.Helper()
	const base = int64(1_700_000_000_000)
	clock := &testClock{}
	backends := []backend{
		newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "ends:", clock.millis),
		newRedisBackend(server.Client(t), nil, alg, "ends:"+t.Name()+":", &Config{clock: clock.millis}),
	}
	ctx := context.Background()
	answers := make([][]Result, len(backends))
	for i, b := range backends {
		for _, s := range steps {
			clock.now.Store(base + s.at)
			var v Result
			var err error
			if s.refund {
				taken := answers[i][s.refundOf]
				v, err = b.adjust(ctx, "k", s.ls, s.cost, &taken)
			} else {
				v, err = b.take(ctx, "k", s.ls, s.cost)
			}
			require.NoError(t, err)
			answers[i] = append(answers[i], v)
		}
	}
	for i := range steps {
		s, r := answers[0][i], answers[1][i]
		require.Equal(t, s.Allowed(), r.Allowed(), "step %d at %d: Allowed", i, steps[i].at)
		require.Equal(t, s.RetryAfter(), r.RetryAfter(), "step %d at %d: RetryAfter", i, steps[i].at)
	}
}

// Every call cuts an end further ahead than its own rule's to that rule's
// length, a refund too, on a Storage as on Redis: a refund by a version of
// a shorter MinInterval, or by a replica whose clock runs 5 ms behind,
// leaves a gap the next take finds ended on both.
func TestRefundsCutEndsOnEveryStore(t *testing.T) {
	server := redistest.Start(t)
	r := rule{max: 5, burst: 5, window: 60_000}
	long, short, same := one(r), one(r), one(r)
	long.gap, short.gap, same.gap = 300, 100, 20
	cases := map[string][]endsStep{
		"a shorter MinInterval": {
			{at: 0, ls: &long, cost: 1},                              // the gap runs to 300
			{at: 10, ls: &short, cost: 1, refund: true, refundOf: 0}, // cut to 110
			{at: 200, ls: &long, cost: 1},                            // after it
		},
		"a clock 5 ms behind": {
			{at: 1000, ls: &same, cost: 1},                           // the gap runs to 1020
			{at: 995, ls: &same, cost: 1, refund: true, refundOf: 0}, // cut to 1015
			{at: 1017, ls: &same, cost: 1},                           // after it
		},
	}
	for _, alg := range allAlgorithms {
		for name, steps := range cases {
			t.Run(alg.name()+"/"+name, func(t *testing.T) { storesAgree(t, server, alg, steps) })
		}
	}
}

// A take of cost 0 that cuts another version's gap writes the limits'
// states as it read them, on a Storage as on Redis: not as its own smaller
// MaxFunc reads them, which would cut a count the larger one spent.
func TestCostZeroTakesKeepLargerMaxFuncCounts(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} { // no MaxFunc with the log
		t.Run(alg.name(), func(t *testing.T) {
			big, small := one(rule{max: 10, burst: 10, window: 60_000}), one(rule{max: 5, burst: 5, window: 60_000})
			big.gap, small.gap = 300, 100
			storesAgree(t, server, alg, []endsStep{
				{at: 0, ls: &big, cost: 10},   // 10 of 10; the gap runs to 300
				{at: 10, ls: &small, cost: 0}, // admitted, the gap cut to 110
				{at: 400, ls: &big, cost: 1},  // 10 of 10 still spent
			})
		})
	}
}

// An operator's Block under the base limits keeps the counts a larger
// MaxFunc spent, on Redis as in memory and on a Storage: once the hold
// ends, a take under the larger MaxFunc finds them still spent.
func TestBlocksKeepLargerMaxFuncCounts(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} { // no MaxFunc with the log
		for _, rules := range []struct {
			name       string
			block, gap int64
		}{{"neither", 0, 0}, {"BlockFor", 300, 0}, {"MinInterval", 0, 20}, {"both", 300, 20}} {
			t.Run(alg.name()+"/"+rules.name, func(t *testing.T) {
				const base = int64(1_700_000_000_000)
				clock := &testClock{}
				big, small := one(rule{max: 10, burst: 10, window: 60_000}), one(rule{max: 5, burst: 5, window: 60_000})
				big.block, big.gap, small.block, small.gap = rules.block, rules.gap, rules.block, rules.gap
				ctx := context.Background()
				for _, b := range []blockingStore{
					testManager(alg, small, 100, clock.millis),
					newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "held:", clock.millis),
					newRedisBackend(server.Client(t), nil, alg, "held:"+t.Name()+":", &Config{clock: clock.millis}),
				} {
					clock.now.Store(base)
					v, err := b.take(ctx, "k", &big, 10)
					require.NoError(t, err)
					require.True(t, v.Allowed())
					clock.now.Store(base + 10)
					_, _, err = b.block(ctx, "k", &small, 100)
					require.NoError(t, err)
					clock.now.Store(base + 1000)
					v, err = b.take(ctx, "k", &big, 1)
					require.NoError(t, err)
					assert.False(t, v.Allowed(), "%T: the larger MaxFunc's count was cut by the hold", b)
				}
			})
		}
	}
}

// With BlockFor shorter than MinInterval, a take timed BlockFor before
// the gap's end is rejected for the gap and starts a block that ends with
// it. Ends on one ms are how a key keeps an operator's hold, so the block
// and the gap are written a ms apart, on every store: an operator's Block
// of 1 ms then leaves the rest of the gap in force, as it does when the
// client's take comes a ms sooner.
func TestBlockAndGapEndingTogetherAreNoHold(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, at := range []int64{279, 280} { // the block's end a ms before the gap's, and on it
			t.Run(alg.name()+"/"+map[int64]string{279: "apart", 280: "together"}[at], func(t *testing.T) {
				const base = int64(1_700_000_000_000)
				clock := &testClock{}
				ls := one(rule{max: 5, burst: 5, window: 60_000})
				ls.block, ls.gap = 20, 300
				ctx := context.Background()
				for _, b := range []blockingStore{
					testManager(alg, ls, 100, clock.millis),
					newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "together:", clock.millis),
					newRedisBackend(server.Client(t), nil, alg, "together:"+t.Name()+":", &Config{clock: clock.millis}),
				} {
					clock.now.Store(base)
					v, err := b.take(ctx, "k", &ls, 1)
					require.NoError(t, err)
					require.True(t, v.Allowed()) // the gap runs to 300
					clock.now.Store(base + at)
					v, err = b.take(ctx, "k", &ls, 1)
					require.NoError(t, err)
					require.False(t, v.Allowed()) // for the gap: a block of 20
					clock.now.Store(base + 285)
					_, _, err = b.block(ctx, "k", &ls, 1)
					require.NoError(t, err)
					clock.now.Store(base + 290)
					v, err = b.take(ctx, "k", &ls, 1)
					require.NoError(t, err)
					assert.False(t, v.Allowed(), "%T: a take inside the gap was admitted", b)
				}
			})
		}
	}
}

// The same block and gap hold off no replica of the limiter without
// either rule (a deploy that turns them off): it keeps their ends for the
// replicas that enforce them, and decides by its counts.
func TestBlockAndGapEndingTogetherHoldNoVersionWithoutRules(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			const base = int64(1_700_000_000_000)
			clock := &testClock{}
			both, neither := one(rule{max: 5, burst: 5, window: 60_000}), one(rule{max: 5, burst: 5, window: 60_000})
			both.block, both.gap = 20, 300
			ctx := context.Background()
			for _, b := range []backend{
				newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "apart:", clock.millis),
				newRedisBackend(server.Client(t), nil, alg, "apart:"+t.Name()+":", &Config{clock: clock.millis}),
			} {
				for _, s := range []struct {
					at      int64
					ls      *limits
					allowed bool
				}{
					{0, &both, true},
					{280, &both, false},   // for the gap: a block to 300
					{290, &neither, true}, // by its counts
				} {
					clock.now.Store(base + s.at)
					v, err := b.take(ctx, "k", s.ls, 1)
					require.NoError(t, err)
					require.Equal(t, s.allowed, v.Allowed(), "%T at %d", b, s.at)
				}
			}
		})
	}
}
