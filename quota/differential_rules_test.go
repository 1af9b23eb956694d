package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/require"
)

// rulesTraceSeeds is how many traces TestKeyRulesTracesMatchAcrossStores
// plays of each shape.
var rulesTraceSeeds = 3

// Random traces of every call a key sees (takes of cost 0 to 2, some up
// to a cost; refunds, penalties and rewards; Peek, Block and Reset) by
// versions of one limiter that differ in BlockFor and MinInterval (sets
// that leave out the one case where a 6-byte end is read as another
// rule's: see TestLayoutsMatchAcrossBackends) and in Max as a MaxFunc
// would, under one limit and two, give the same answers on a Storage and
// on Redis. Each plays at times of any ms and on a 10 ms grid, where ends
// of blocks, gaps and holds fall on one ms.
func TestKeyRulesTracesMatchAcrossStores(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	type version struct{ block, gap, max int64 }
	sets := map[string][]version{
		"both":        {{300, 20, 5}, {20, 300, 5}, {100, 100, 5}, {0, 0, 5}, {300, 20, 10}},
		"BlockFor":    {{300, 0, 5}, {100, 0, 10}, {0, 0, 5}},
		"MinInterval": {{0, 300, 5}, {0, 20, 10}, {0, 0, 5}},
		"neither":     {{0, 0, 5}, {0, 0, 10}},
	}
	for _, alg := range allAlgorithms {
		for name, set := range sets {
			for _, n := range []int{1, 2} {
				for seed := range rulesTraceSeeds {
					for _, grid := range []int64{1, 10} {
						t.Run(fmt.Sprintf("%s/%s/%d/%d/%d", alg.name(), name, n, seed, grid), func(t *testing.T) {
							const base = int64(1_700_000_000_000)
							clock := &testClock{}
							clock.now.Store(base)
							prefix := "traces:" + t.Name() + ":"
							stores := []remoteBackend{
								newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, prefix, clock.millis),
								newRedisBackend(server.Client(t), nil, alg, prefix, &Config{clock: clock.millis}),
							}
							rng := rand.New(rand.NewPCG(uint64(seed), uint64(alg)*7+uint64(n)))
							limitsOf := func(v version, upTo bool) limits {
								m := v.max
								if alg == SlidingLog || alg == TokenBucket {
									m = 5 // no MaxFunc with the log; the bucket's is TestVaryingLimitsMatchMemory's
								}
								ls := one(rule{max: m, burst: m, window: 2000})
								if n == 2 {
									ls.n = 2
									ls.r[1] = rule{max: 2 * m, burst: 2 * m, window: 5000}
								}
								ls.block, ls.gap, ls.upTo = v.block, v.gap, upTo
								return ls
							}
							ctx := context.Background()
							held := map[string][]Result{}
							var trace []string
							for step := range 400 {
								ms := rng.Int64N(60)
								if rng.IntN(15) == 0 {
									ms += rng.Int64N(400)
								}
								clock.advance(time.Duration(ms-ms%grid) * time.Millisecond)
								key := "k" + strconv.Itoa(rng.IntN(2))
								// The Storage keeps a value for good; Redis keeps it a
								// minute of real time, past any end of the trace's.
								require.NoError(t, admin.PExpire(ctx, prefix+key, time.Minute).Err())
								ls := limitsOf(set[rng.IntN(len(set))], rng.IntN(6) == 0)
								op := rng.IntN(20)
								var taken Result
								adjustable := len(held[key]) > 0 // decided before either store is called
								if adjustable {
									taken = held[key][len(held[key])-1]
								}
								var call string
								var answers [2]string
								for i, s := range stores {
									var v Result
									var heldFor int64
									var err error
									switch {
									case op == 0:
										call = "peek"
										v, heldFor, err = s.peek(ctx, key, &ls)
									case op == 1:
										d := 1 + int64(step*37%200)
										call = "block " + strconv.FormatInt(d, 10)
										v, heldFor, err = s.block(ctx, key, &ls, d)
									case op == 2 && step%5 == 0:
										call = "reset"
										err = s.reset(ctx, key)
									case op <= 6 && adjustable:
										adj := taken
										call = "refund"
										if op == 4 && alg != SlidingLog {
											adj, call = Result{n: ls.n, adjust: penalty}, "penalty"
										} else if op == 5 {
											adj, call = Result{n: ls.n, adjust: reward}, "reward"
										}
										v, err = s.adjust(ctx, key, &ls, 1, &adj)
									default:
										cost := int64(step % 3)
										call = "take " + strconv.FormatInt(cost, 10)
										v, err = s.take(ctx, key, &ls, cost)
										if i == 0 && v.Allowed() {
											held[key] = append(held[key], v)
										}
									}
									require.NoError(t, err)
									answers[i] = fmt.Sprintf("%+v held %d", v, heldFor)
								}
								if call == "refund" {
									held[key] = held[key][:len(held[key])-1]
								}
								trace = append(trace, fmt.Sprintf("step %d at %d on %s: %s by block %d gap %d max %d upTo %v",
									step, clock.millis()-base, key, call, ls.block, ls.gap, ls.r[0].max, ls.upTo))
								require.Equal(t, answers[0], answers[1], "the Storage's answer, then Redis's, after\n%s",
									strings.Join(trace[max(0, len(trace)-12):], "\n"))
							}
						})
					}
				}
			}
		}
	}
}
