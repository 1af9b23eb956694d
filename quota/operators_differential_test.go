package quota

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// operated is a backend with the operators' calls, as the in-memory
// manager and the remote backends each have them.
type operated struct {
	backend
	peek  func(ctx context.Context, key string, ls *limits) (Result, int64, error)
	block func(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error)
	reset func(ctx context.Context, key string) error
}

func operatedManager(m *manager) operated {
	return operated{
		backend: m,
		peek: func(ctx context.Context, key string, ls *limits) (Result, int64, error) {
			v, held := m.peek(ctx, key, ls)
			return v, held, nil
		},
		block: m.block,
		reset: func(ctx context.Context, key string) error { m.reset(ctx, key); return nil },
	}
}

func operatedRemote(b remoteBackend) operated {
	return operated{backend: b, peek: b.peek, block: b.block, reset: b.reset}
}

// A random trace of takes (some up to a cost), peeks, blocks and resets
// gives the same answers from the in-memory manager, a Storage and Redis
// (with the client clock), for every algorithm, with no key rules, with
// BlockFor, MinInterval or both, and one limit or two: Peek and Block
// answer alike (held included), and the takes after them too, so a peek
// counted nothing anywhere, a block held the key in each, and a reset
// forgot it in each. Blocks and resets come often enough that takes meet
// keys held, held and reset, and held past their end.
func TestOperatorsMatchAcrossBackends(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name       string
		rules      []rule
		block, gap int64
	}{
		{"plain", []rule{{max: 4, window: 500}}, 0, 0},
		{"plain/two", []rule{{max: 3, window: 300}, {max: 6, window: 2000}}, 0, 0},
		{"block", []rule{{max: 4, window: 500}}, 150, 0},
		{"gap/two", []rule{{max: 3, window: 300}, {max: 6, window: 2000}}, 0, 60},
		{"both", []rule{{max: 4, window: 500}}, 300, 40},
	}
	for _, alg := range allAlgorithms {
		for _, c := range cases {
			t.Run(alg.name()+"/"+c.name, func(t *testing.T) {
				ls := traceLimits(alg, c.rules, c.block, c.gap)
				clock := newTraceClock(1_700_000_000_000)
				prefix := "ops:" + alg.name() + ":" + c.name + ":"
				backends := []operated{
					operatedManager(testManager(alg, ls, 1<<10, clock.millis)),
					operatedRemote(newStorageBackend(&mapStorage{m: map[string][]byte{}}, alg, prefix, clock.millis)),
					operatedRemote(newRedisBackend(server.Client(t), nil, alg, prefix, &Config{clock: clock.millis})),
				}
				rng := rand.New(rand.NewPCG(7, uint64(alg)<<8|uint64(len(c.name))))
				ctx := context.Background()
				var peeks, blocks, resets, heldTakes, heldPeeks int
				for step := range 2500 {
					clock.step(rng.Int64N(40))
					key := "k" + strconv.Itoa(rng.IntN(3))
					at := ls
					var answers [3]Result
					var helds [3]int64
					what := ""
					switch r := rng.IntN(20); {
					case r < 3:
						what = "peek"
						peeks++
					case r == 3:
						what = "block"
						blocks++
					case r == 4 && step%2 == 0:
						what = "reset"
						resets++
					default:
						at.upTo = rng.IntN(4) == 0
						what = "take"
					}
					d := 1 + rng.Int64N(400)
					cost := int64(rng.IntN(int(capacity(alg, ls.r[0])) + 2))
					for i, b := range backends {
						var err error
						switch what {
						case "peek":
							answers[i], helds[i], err = b.peek(ctx, key, &at)
						case "block":
							answers[i], helds[i], err = b.block(ctx, key, &at, d)
						case "reset":
							err = b.reset(ctx, key)
						default:
							answers[i], err = b.take(ctx, key, &at, cost)
						}
						require.NoError(t, err)
					}
					if os.Getenv("OPDEBUG") == key {
						t.Logf("step %d at %d: %s %s d=%d cost=%d upTo=%v: allowed %v held %v retry %v", step, clock.millis()-1_700_000_000_000, what, key, d, cost, at.upTo, answers[0].Allowed(), helds, answers[0].RetryAfter())
					}
					for i := 1; i < len(answers); i++ {
						require.Equal(t, answers[0], answers[i], "step %d: %s on backend %d, key %s cost %d", step, what, i, key, cost)
						require.Equal(t, helds[0], helds[i], "step %d: %s on backend %d: held", step, what, i)
					}
					switch {
					case what == "block":
						require.GreaterOrEqual(t, helds[0], d, "step %d: a block holds for d at least", step)
						require.False(t, answers[0].Allowed())
					case what == "peek" && helds[0] > 0:
						heldPeeks++
						require.False(t, answers[0].Allowed())
					case what == "take" && !answers[0].Allowed() && answers[0].RetryAfter() != Never:
						heldTakes++
					}
				}
				t.Logf("%d peeks (%d held), %d blocks, %d resets, %d rejected takes", peeks, heldPeeks, blocks, resets, heldTakes)
				assert.Greater(t, heldPeeks, 20)
				assert.Greater(t, resets, 20)
			})
		}
	}
}

// Peek counts nothing: ten peeks between takes leave each algorithm's
// answers as they were without them, in memory and on Redis.
func TestPeeksCountNothing(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, onRedis := range []bool{false, true} {
			t.Run(alg.name()+"/"+strconv.FormatBool(onRedis), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{Algorithm: alg, Limits: []Limit{{Max: 5, Expiration: time.Second}}, Now: now.Now, Name: "peeks" + strconv.FormatBool(onRedis)}
				if onRedis {
					cfg.Redis = server.Client(t)
				}
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				for i := range 5 {
					for range 10 {
						st, err := l.Peek(ctx, "k")
						require.NoError(t, err)
						assert.Equal(t, 5-i, st.Tightest().Remaining)
						assert.True(t, st.Allowed())
						assert.False(t, st.Blocked())
					}
					requireAllowed(t, l, "k")
				}
				st, err := l.Peek(ctx, "k")
				require.NoError(t, err)
				assert.False(t, st.Allowed(), "the quota is spent")
				assert.Positive(t, st.RetryAfter())
				assert.Zero(t, st.Held)
			})
		}
	}
}
