package quota

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A random trace of takes and takes up to a cost, under BlockFor,
// MinInterval or both and one limit or two, gives the same decisions from
// the in-memory manager, a Storage and Redis (with the client clock), for
// every algorithm: among them rejections while a block or a gap holds the
// key off, whose RetryAfter is the later of the hold's end and the limits'
// own wait for the cost (or Never, for a cost above a quota). After a
// rejection the trace often retries the same take once RetryAfter has
// passed, and it is admitted.
func TestHeldTakesMatchAcrossBackends(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name       string
		rules      []rule
		block, gap int64
	}{
		{"block", []rule{{max: 4, window: 500}}, 150, 0},
		{"gap", []rule{{max: 4, window: 500}}, 0, 60},
		{"gap/two", []rule{{max: 3, window: 300}, {max: 6, window: 2000}}, 0, 60},
		{"both/two", []rule{{max: 3, window: 300}, {max: 6, window: 2000}}, 120, 40},
	}
	for _, alg := range allAlgorithms {
		for _, c := range cases {
			t.Run(alg.name()+"/"+c.name, func(t *testing.T) {
				ls := traceLimits(alg, c.rules, c.block, c.gap)
				const base = int64(1_700_000_000_000)
				clock := newTraceClock(base)
				prefix := "held:" + alg.name() + ":" + c.name + ":"
				backends := []backend{
					testManager(alg, ls, 1<<10, clock.millis),
					newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, prefix, clock.millis),
					newRedisBackend(server.Client(t), nil, alg, prefix, &Config{clock: clock.millis}),
				}
				rng := rand.New(rand.NewPCG(11, uint64(alg)<<8|uint64(len(c.name))))
				ctx := context.Background()
				// The hold each key is under, as the rules say it: the end
				// of its block and of the gap since its last admitted take.
				blockEnd, gapEnd := map[string]int64{}, map[string]int64{}
				var held, heldLonger, heldNever, retried int
				decide := func(step int, key string, at limits, cost int64) Result {
					t.Helper()
					var answers [3]Result
					for i, b := range backends {
						v, err := b.take(ctx, key, &at, cost)
						require.NoError(t, err)
						answers[i] = v
					}
					for i := 1; i < len(answers); i++ {
						require.Equal(t, answers[0], answers[i], "step %d: backend %d, key %s cost %d (up to %v) at %d ms",
							step, i, key, cost, at.upTo, clock.millis()-base)
					}
					return answers[0]
				}
				type rejection struct {
					key  string
					at   limits
					cost int64
					wait int64
				}
				var retry *rejection
				for step := range 3000 {
					var key string
					var at limits
					var cost int64
					retrying := retry != nil
					if retrying {
						clock.step(retry.wait) // the clock's real-time part only adds
						key, at, cost, retry = retry.key, retry.at, retry.cost, nil
						retried++
					} else {
						clock.step(rng.Int64N(40))
						key = "k" + strconv.Itoa(rng.IntN(3))
						at = ls
						at.upTo = rng.IntN(4) == 0
						cost = int64(rng.IntN(int(capacity(alg, ls.r[0])) + 2))
					}
					now := clock.millis()
					rest := blockEnd[key] - now
					if cost > 0 {
						rest = max(rest, gapEnd[key]-now)
					}
					v := decide(step, key, at, cost)
					require.True(t, v.Allowed() || !retrying, "step %d: the retry after RetryAfter, rejected for %v", step, v.RetryAfter())
					switch {
					case v.Allowed():
						if (at.upTo && v.granted > 0 || !at.upTo && cost > 0) && ls.gap > 0 {
							gapEnd[key] = now + ls.gap
						}
						continue
					case rest > 0 && v.RetryAfter() == Never:
						heldNever++
					case rest > 0:
						held++
						require.GreaterOrEqual(t, v.RetryAfter(), time.Duration(rest)*time.Millisecond, "step %d", step)
						if v.RetryAfter() > time.Duration(rest)*time.Millisecond {
							heldLonger++
						}
					}
					if v.RetryAfter() != Never && ls.block > 0 && blockEnd[key] <= now {
						blockEnd[key] = now + ls.block // a block a rejection does not draw out
					}
					if v.RetryAfter() != Never && rng.IntN(3) == 0 {
						retry = &rejection{key, at, cost, int64(v.RetryAfter() / time.Millisecond)}
					}
				}
				t.Logf("%d takes held, %d of them for longer than the hold, %d never admissible; %d retries after RetryAfter",
					held, heldLonger, heldNever, retried)
				assert.Greater(t, held, 50)
				assert.Greater(t, heldLonger, 10, "the trace rarely found a hold shorter than the limits' wait")
				assert.Positive(t, heldNever)
				assert.Greater(t, retried, 50)
			})
		}
	}
}

// traceLimits is the limits of a trace's rules, with BlockFor block and
// MinInterval gap (ms): each rule's burst is its max, and for the token
// bucket above it (by 1 for the first rule, 2 for the second, ...).
func traceLimits(alg Algorithm, rules []rule, block, gap int64) limits {
	ls := limits{n: len(rules), block: block, gap: gap}
	for i, r := range rules {
		r.burst = r.max
		if alg == TokenBucket {
			r.burst = r.max + int64(i) + 1
		}
		ls.r[i] = r
	}
	return ls
}
