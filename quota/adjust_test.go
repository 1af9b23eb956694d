package quota

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Penalize and Reward on a clock: a penalty counts whether or not it fits,
// up to the whole quota; a reward gives back what is spent, whichever
// request counted it, and never more; the quota comes back as the
// algorithm has it.
func TestPenalizeAndReward(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				testPenalizeAndReward(t, alg, b.set)
			})
		}
	}
}

func testPenalizeAndReward(t *testing.T, alg Algorithm, set func(*Config)) {
	now := newSettableNow()
	cfg := Config{Algorithm: alg, Limits: []Limit{PerMinute(5)}, Now: now.Now, Name: "adjust-" + alg.name()}
	set(&cfg)
	l, err := New(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	remaining := func(res Result, err error) int {
		t.Helper()
		require.NoError(t, err)
		require.True(t, res.Allowed(), "an adjustment answers as a take of cost 0")
		return res.Decisions()[0].Remaining
	}
	assert.Equal(t, 2, remaining(l.Penalize(ctx, "k", 3)), "a penalty on a key with none")
	assert.Equal(t, 0, remaining(l.Penalize(ctx, "k", 4)), "a penalty past the quota counts up to it")
	for range 5 {
		_, err := l.Take(ctx, "spent", 1)
		require.NoError(t, err)
	}
	res, err := l.Take(ctx, "k", 1)
	require.NoError(t, err)
	spent, err := l.Take(ctx, "spent", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed())
	assert.False(t, spent.Allowed())
	assert.Positive(t, res.RetryAfter())
	assert.LessOrEqual(t, res.RetryAfter(), spent.RetryAfter(), "held off no longer than a quota spent by takes")
	assert.Equal(t, 2, remaining(l.Reward(ctx, "k", 2)))
	assert.Equal(t, 5, remaining(l.Reward(ctx, "k", 100)), "a reward gives back what is spent, no more")
	assert.Equal(t, 5, remaining(l.Reward(ctx, "fresh", 3)), "a reward on a key with nothing spent")
	assert.Equal(t, 5, remaining(l.Penalize(ctx, "zero", 0)))

	assert.Equal(t, 0, remaining(l.Penalize(ctx, "k", 5)))
	now.Add(2 * time.Minute)
	res, err = l.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed(), "the quota comes back")

	_, err = l.Penalize(ctx, "k", -1)
	assert.ErrorContains(t, err, "penalize: cost is -1")
	_, err = l.Reward(ctx, "k", -1)
	assert.ErrorContains(t, err, "reward: cost is -1")
}

// settableNow is a Config.Now that a test moves on, read safely by the
// limiter's own goroutines too.
type settableNow struct{ ms atomic.Int64 }

func newSettableNow() *settableNow {
	c := &settableNow{}
	c.ms.Store(1_700_000_000_000)
	return c
}

func (c *settableNow) Now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *settableNow) Set(t time.Time)     { c.ms.Store(t.UnixMilli()) }
func (c *settableNow) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// backendSetting puts a Config on one backend.
type backendSetting struct {
	name string
	set  func(cfg *Config)
}

// everyBackend is memory, a Redis of the test's own, and a Storage.
func everyBackend(t *testing.T) []backendSetting {
	server := redistest.Start(t)
	return []backendSetting{
		{"memory", func(*Config) {}},
		{"redis", func(cfg *Config) { cfg.Redis, cfg.StorageTimeout = server.Client(t), slowMachine }},
		{"storage", func(cfg *Config) { cfg.Storage = &mapStorage{m: map[string][]byte{}} }},
	}
}

// mapStorage is a Storage in a map, for the generic storage backend.
type mapStorage struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *mapStorage) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

func (s *mapStorage) Set(key string, val []byte, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append([]byte(nil), val...)
	return nil
}

func (s *mapStorage) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

// TakeUpTo takes what fits, on every backend and algorithm, under one limit
// and two: all of the cost when it fits, the least room of the limits when
// it does not, and when nothing fits a rejection of one unit that says
// when one fits; a take of 0 takes nothing; its Result refunds.
func TestTakeUpTo(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{
					Algorithm: alg, Limits: []Limit{PerMinute(5), PerHour(7)},
					Now: now.Now, Name: "upto-" + alg.name(),
				}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				upTo := func(cost, want int, allowed bool) Result {
					t.Helper()
					granted, res, err := l.TakeUpTo(ctx, "k", cost)
					require.NoError(t, err)
					assert.Equal(t, want, granted, "TakeUpTo(%d)", cost)
					assert.Equal(t, allowed, res.Allowed(), "TakeUpTo(%d)", cost)
					return res
				}
				upTo(3, 3, true)
				res := upTo(4, 2, true) // the minute has 2 left
				assert.Equal(t, 0, res.Tightest().Remaining)
				res = upTo(2, 0, false)
				assert.Positive(t, res.RetryAfter())
				upTo(0, 0, true)
				now.Add(2 * time.Minute)
				res = upTo(9, 2, true) // the hour has 2 left
				after, err := l.Refund(ctx, "k", 2, &res)
				require.NoError(t, err)
				assert.Equal(t, 2, after.Decisions()[1].Remaining, "the granted units refund")
				_, _, err = l.TakeUpTo(ctx, "k", -1)
				assert.Error(t, err)
			})
		}
	}
}

// On Redis, with the deny cache, a take rejected for its cost does not keep
// TakeUpTo from the room that is left, and a TakeUpTo that finds none is
// kept as the rejection of one unit it is, not of its cost.
func TestTakeUpToAndTheDenyCache(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			now := newSettableNow() // one instant: RetryAfters compare
			l, err := New(Config{
				Algorithm: alg, Limits: []Limit{PerHour(5)}, Redis: server.Client(t), Name: "deny-upto-" + alg.name(),
				Now: now.Now, StorageTimeout: slowMachine,
			})
			require.NoError(t, err)
			ctx := context.Background()
			res, err := l.Take(ctx, "k", 2)
			require.NoError(t, err)
			require.True(t, res.Allowed())
			res, err = l.Take(ctx, "k", 5)
			require.NoError(t, err)
			require.False(t, res.Allowed())
			granted, res, err := l.TakeUpTo(ctx, "k", 5)
			require.NoError(t, err)
			assert.Equal(t, 3, granted)
			assert.Equal(t, SourceBackend, res.Source())

			granted, res, err = l.TakeUpTo(ctx, "k", 5)
			require.NoError(t, err)
			assert.Equal(t, 0, granted)
			one := res.RetryAfter()
			res, err = l.Take(ctx, "k", 5)
			require.NoError(t, err)
			assert.False(t, res.Allowed())
			assert.Equal(t, SourceBackend, res.Source(), "a take of 5 is not answered by the rejection of 1")
			assert.GreaterOrEqual(t, res.RetryAfter(), one)
		})
	}
}

// A refund of more than a take could have cost gives back at most what it
// took, in every backend: no overflow turns it into a debt.
func TestRefundOfAHugeCost(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{Algorithm: alg, Limits: []Limit{PerMinute(5)}, Now: now.Now, Name: "huge-" + alg.name()}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				ctx := context.Background()
				res, err := l.Take(ctx, "k", 1)
				require.NoError(t, err)
				after, err := l.Refund(ctx, "k", math.MaxInt, &res)
				require.NoError(t, err)
				assert.Equal(t, 5, after.Decisions()[0].Remaining)
			})
		}
	}
}

// A Result from Penalize handed to Refund is refunded as a take, not
// penalized again.
func TestRefundOfAnAdjustmentIsARefund(t *testing.T) {
	l, err := New(Config{Limits: []Limit{PerMinute(5)}})
	require.NoError(t, err)
	ctx := context.Background()
	p, err := l.Penalize(ctx, "k", 2)
	require.NoError(t, err)
	after, err := l.Refund(ctx, "k", 1, &p)
	require.NoError(t, err)
	assert.Equal(t, 4, after.Decisions()[0].Remaining)
}

// A random trace of takes, takes up to a cost, penalties, rewards and
// refunds gives the same answers from the in-memory manager and from Redis
// on the caller's clock, for every algorithm, under one limit and under
// two, without and with a BlockFor and a MinInterval.
func TestAdjustmentsMatchMemory(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		for _, n := range []int{1, 2} {
			for _, key := range [][2]int64{{0, 0}, {500, 0}, {0, 120}, {500, 120}} {
				block, gap := key[0], key[1]
				t.Run(alg.name()+"/"+strconv.Itoa(n)+"/block"+strconv.FormatInt(block, 10)+"/gap"+strconv.FormatInt(gap, 10), func(t *testing.T) {
					testAdjustmentsMatchMemory(t, server, alg, n, block, gap)
				})
			}
		}
	}
}

func testAdjustmentsMatchMemory(t *testing.T, server *redistest.Server, alg Algorithm, n int, block, gap int64) {
	{
		{
			{
				ls := limits{n: n, block: block, gap: gap}
				ls.r[0] = rule{max: 4, burst: 4, window: 300}
				ls.r[1] = rule{max: 9, burst: 9, window: 3000}
				if alg == TokenBucket {
					ls.r[0].burst, ls.r[1].burst = 6, 7
				}
				clock := newTraceClock(1_700_000_000_000)
				mem := testManager(alg, ls, 1<<20, clock.millis)
				red := newRedisBackend(server.Client(t), nil, alg, "adjust-diff:"+alg.name()+strconv.Itoa(n)+":"+strconv.FormatInt(block, 10)+":"+strconv.FormatInt(gap, 10)+":", &Config{clock: clock.millis})
				rng := rand.New(rand.NewPCG(11, uint64(alg)<<4|uint64(n)))
				ctx := context.Background()
				last := map[string]Result{}
				var ops [5]int
				blocked := 0 // rejections that a block answered or began
				for step := range 3000 {
					clock.step(rng.Int64N(60))
					key := "k" + strconv.Itoa(rng.IntN(6))
					var want, got Result
					var err error
					op := rng.IntN(7)
					prev, held := last[key]
					switch {
					case op == 0 || op == 1:
						adj := penalty
						if op == 1 {
							adj = reward
						}
						cost := int64(rng.IntN(12))
						v := Result{n: n, adjust: adj}
						want, err = mem.adjust(ctx, key, &ls, cost, &v)
						require.NoError(t, err)
						got, err = red.adjust(ctx, key, &ls, cost, &v)
						require.NoError(t, err)
						ops[op]++
					case op == 6:
						up := ls
						up.upTo = true
						cost := int64(rng.IntN(12))
						want, err = mem.take(ctx, key, &up, cost)
						require.NoError(t, err)
						got, err = red.take(ctx, key, &up, cost)
						require.NoError(t, err)
						ops[4]++
					case op == 2 && held:
						v := prev
						want, err = mem.adjust(ctx, key, &ls, 1, &v)
						require.NoError(t, err)
						got, err = red.adjust(ctx, key, &ls, 1, &v)
						require.NoError(t, err)
						delete(last, key)
						ops[2]++
					default:
						cost := int64(rng.IntN(4))
						want, err = mem.take(ctx, key, &ls, cost)
						require.NoError(t, err)
						got, err = red.take(ctx, key, &ls, cost)
						require.NoError(t, err)
						if want.Allowed() && cost == 1 {
							last[key] = want
						}
						ops[3]++
					}
					require.Equal(t, want, got, "step %d, op %d, key %s", step, op, key)
					if !want.Allowed() && want.RetryAfter() >= time.Duration(block)*time.Millisecond && want.RetryAfter() != Never {
						blocked++
					}
				}
				t.Logf("penalties %d, rewards %d, refunds %d, takes %d, takes up to %d; blocked %d", ops[0], ops[1], ops[2], ops[3], ops[4], blocked)
				if block > 0 {
					assert.Positive(t, blocked, "no take was blocked")
				}
			}
		}
	}
}
