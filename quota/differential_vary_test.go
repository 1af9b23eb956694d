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

// A random trace in which every request brings its own limit (a MaxFunc)
// gives the same decisions from the in-memory manager, from a Storage and
// from Redis, refunds and rewards included: a refund is made under the
// limit of the request it gives back, which may lie below what the key
// has spent under others. Each refund's answer is compared too, and after
// it a take of 0 under the largest limit shows what it left. A refund may
// never leave more room than the key had before it plus its cost.
func TestVaryingLimitsMatchMemory(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		alg    Algorithm
		window int64 // ms
		keys   int
	}{
		{FixedWindow, 400, 4},
		{SlidingWindow, 400, 4},
		// A bucket's state ends when it has refilled at its writer's rate:
		// a reader of a lower rate may then see debt left in a key that
		// Redis still holds (its TTL runs in real time, slower than the
		// trace's clock) and the manager has dropped. A long window keeps
		// every state within its TTL for the whole trace; many keys, and
		// so many admissions, make up for its slow refill.
		{TokenBucket, 1_000_000, 200},
	}
	for _, c := range cases {
		alg := c.alg
		t.Run(alg.name(), func(t *testing.T) {
			const base = int64(1_700_000_000_000)
			clock := newTraceClock(base)
			ruleOf := func(limit int64) rule {
				return rule{max: limit, burst: limit, window: c.window}
			}
			largest := ruleOf(12)
			lsLargest := one(largest)
			backends := []backend{
				testManager(alg, lsLargest, 1<<20, clock.millis),
				newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, "vary:", clock.millis),
				newRedisBackend(server.Client(t), nil, alg, "vary:"+alg.name()+":", &Config{clock: clock.millis}),
			}
			names := []string{"memory", "storage", "redis"}
			rng := rand.New(rand.NewPCG(11, uint64(alg)))
			type taken struct {
				d    Decision
				r    rule
				cost int64
			}
			held := map[string][]taken{}
			ctx := context.Background()
			all := func(step int, what string, f func(b backend) (Result, error)) Result {
				t.Helper()
				var want Result
				for i, b := range backends {
					got, err := f(b)
					require.NoError(t, err)
					if i == 0 {
						want = got
						continue
					}
					require.Equal(t, want, got, "step %d: %s, %s against memory", step, what, names[i])
				}
				return want
			}
			var refunds, admitted int
			for step := range 3000 {
				clock.step(rng.Int64N(25))
				key := "k" + strconv.Itoa(rng.IntN(c.keys))
				if alg != TokenBucket {
					// Redis drops a key by its TTL in real time, which runs on
					// while the trace's clock stands still within a step: a
					// state the step finds a few ms from its end could be
					// gone before the step's last call. Held longer, a
					// window's state reads the same (its times say it has
					// ended), so the key is kept for a minute at least.
					require.NoError(t, server.Client(t).PExpire(ctx, "vary:"+alg.name()+":"+key, time.Minute).Err())
				}
				if h := held[key]; len(h) > 0 && rng.IntN(4) == 0 {
					j := rng.IntN(len(h))
					tk := h[j]
					held[key] = append(h[:j], h[j+1:]...)
					before := all(step, "look before the refund", func(b backend) (Result, error) {
						return b.take(ctx, key, &lsLargest, 0)
					})
					ls := one(tk.r)
					all(step, "refund under "+strconv.FormatInt(tk.r.max, 10), func(b backend) (Result, error) {
						v := Result{n: 1}
						v.each[0] = tk.d
						return b.adjust(ctx, key, &ls, tk.cost, &v)
					})
					after := all(step, "look after the refund", func(b backend) (Result, error) {
						return b.take(ctx, key, &lsLargest, 0)
					})
					require.LessOrEqual(t, after.each[0].Remaining, before.each[0].Remaining+int(tk.cost),
						"step %d: a refund of %d under limit %d gave back more than it took", step, tk.cost, tk.r.max)
					refunds++
					continue
				}
				r := ruleOf([]int64{2, 5, 12}[rng.IntN(3)])
				cost := int64(1 + rng.IntN(3))
				ls := one(r)
				v := all(step, key+": take of "+strconv.FormatInt(cost, 10)+" under "+strconv.FormatInt(r.max, 10), func(b backend) (Result, error) {
					return b.take(ctx, key, &ls, cost)
				})
				if v.Allowed() {
					admitted++
					held[key] = append(held[key], taken{v.each[0], r, cost})
				}
			}
			require.Greater(t, refunds, 300, "the trace refunds")
			require.Greater(t, admitted, 600, "the trace admits")
		})
	}
}
