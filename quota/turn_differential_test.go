package quota

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A random trace of takes with a turn (time, key, cost, delay) and of
// turns given back gives the same verdicts, waits and states from the
// in-memory manager and from Redis with the client clock, under one, two
// and three limits, for every algorithm: the Go twin (decideTurnInto,
// tokenBucket.untaken) and the Lua one (head.lua's tries) agree.
func TestTurnsMatchMemory(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name  string
		rules []rule
		burst []int64
		step  int64
		delay int64
	}{
		{"one", []rule{{max: 4, window: 200}}, []int64{2}, 60, 500},
		{"two", []rule{{max: 3, window: 300}, {max: 5, window: 1000}}, []int64{2, 6}, 120, 900},
		{"three", []rule{{max: 2, window: 100}, {max: 4, window: 600}, {max: 7, window: 2000}}, []int64{3, 4, 7}, 90, 1500},
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
				red := newRedisBackend(server.Client(t), nil, alg, "turns-diff:"+alg.name()+":"+c.name+":", &Config{clock: clock.millis})
				rng := rand.New(rand.NewPCG(11, uint64(alg)<<8|uint64(ls.n)))
				type taken struct {
					v    Result
					cost int64
				}
				held := map[string][]taken{}
				var now, waited, rejected, cancels int
				ctx := context.Background()
				for step := range 1500 {
					clock.step(rng.Int64N(c.step))
					key := "k" + strconv.Itoa(rng.IntN(4))
					if h := held[key]; len(h) > 0 && rng.IntN(5) == 0 {
						j := rng.IntN(len(h))
						want, err := mem.adjust(ctx, key, &ls, h[j].cost, &h[j].v)
						require.NoError(t, err)
						got, err := red.adjust(ctx, key, &ls, h[j].cost, &h[j].v)
						require.NoError(t, err)
						require.Equal(t, want, got, "step %d: the state giving back a turn of key %s leaves", step, key)
						held[key] = slices.Delete(h, j, j+1)
						cancels++
						continue
					}
					cost := int64(rng.IntN(3))
					turn := ls
					turn.turn, turn.delay = true, rng.Int64N(c.delay)
					want, err := mem.take(ctx, key, &turn, cost)
					require.NoError(t, err)
					got, err := red.take(ctx, key, &turn, cost)
					require.NoError(t, err)
					require.Equal(t, want, got, "step %d: key %s cost %d delay %d at %d ms", step, key, cost, turn.delay, clock.millis()-base)
					switch {
					case !want.Allowed():
						rejected++
					case want.wait > 0:
						waited++
					default:
						now++
					}
					if want.Allowed() && cost > 0 {
						held[key] = append(held[key], taken{want, cost})
					}
				}
				t.Logf("%d admitted now, %d at a later turn, %d rejected, %d turns given back", now, waited, rejected, cancels)
				assert.Positive(t, now)
				assert.Positive(t, waited)
				assert.Positive(t, rejected)
				assert.Positive(t, cancels)
			})
		}
	}
}
