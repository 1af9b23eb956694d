package redis

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Concurrent calls go to Redis as few script calls, each deciding many,
// and every key is still limited exactly: 64 callers on one hot key and 50
// others, for each algorithm; Redis ran fewer script calls than there were
// decisions.
func TestConcurrentCallsShareScriptCalls(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
		t.Run(strconv.Itoa(int(alg)), func(t *testing.T) {
			client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 8})
			t.Cleanup(func() { _ = client.Close() })
			store := New(client).engine
			require.NoError(t, admin.ConfigResetStat(context.Background()).Err())
			const callers, each, limit, others = 64, 60, 100, 50
			rule := Rule{Algorithm: alg, Max: limit, Expiration: time.Hour}
			prefix := "batch-" + strconv.Itoa(int(alg)) + ":"
			var admitted [others + 1]atomic.Int64
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						k := (g*each + i) % (2 * others) // half the calls on key 0, the hot one
						if k >= others {
							k = 0
						}
						r, err := store.Take(context.Background(), prefix+strconv.Itoa(k), rule, 1)
						if !assert.NoError(t, err) {
							return
						}
						if r.Allowed {
							admitted[k].Add(1)
						}
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(limit), admitted[0].Load(), "the hot key")
			for k := 1; k < others; k++ {
				sent := int64(0)
				for g := range callers {
					for i := range each {
						if (g*each+i)%(2*others) == k {
							sent++
						}
					}
				}
				assert.Equal(t, min(sent, limit), admitted[k].Load(), "key %d", k)
			}
			pipelines, calls := store.pipelineStats()
			scripts := store.pipes.stats.scripts.Load()
			evals := redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
			t.Logf("%d decisions: %d pipelines, %d script calls (Redis counted %d)", calls, pipelines, scripts, evals)
			assert.Equal(t, int64(callers*each), calls)
			assert.Less(t, scripts, calls/2, "decisions per script call: 1 without batching")
			assert.Less(t, evals, int(calls/2), "script calls Redis ran")

			// WithoutBatching: as many script calls as decisions, in fewer
			// writes.
			unbatched := New(client, WithoutBatching()).engine
			for range 4 {
				wg.Go(func() {
					for i := range 50 {
						_, err := unbatched.Take(context.Background(), prefix+"u"+strconv.Itoa(i%3), rule, 1)
						assert.NoError(t, err)
					}
				})
			}
			wg.Wait()
			assert.Equal(t, unbatched.pipes.stats.calls.Load(), unbatched.pipes.stats.scripts.Load())
		})
	}
}

// In a batch, a key of another type fails its own call alone; after a
// SCRIPT FLUSH, batches go as EVAL and decide as before.
func TestBatchErrorsAndFlush(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.HSet(ctx, "batch:hash", "f", "v").Err())
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 2})
	t.Cleanup(func() { _ = client.Close() })
	store := New(client).engine
	rule := Rule{Algorithm: FixedWindow, Max: 1000, Expiration: time.Hour}
	b := newBatcher(client, &pipelineStats{}, false)
	calls := []*batchedCall{
		{ctx: ctx, alg: FixedWindow, key: "batch:a", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: "batch:hash", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: "batch:a", arg: testTakeArg()},
	}
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	b.exec(ctx, calls)
	require.NoError(t, calls[0].cmd.Err())
	assert.True(t, goredis.HasErrorPrefix(calls[1].cmd.Err(), "WRONGTYPE"), "%v", calls[1].cmd.Err())
	require.NoError(t, calls[2].cmd.Err())
	assert.Equal(t, 1, redistest.CommandCalls(t, admin, "evalsha"), "one script call for three")
	assert.Equal(t, 2, redistest.CommandCalls(t, admin, "get"), "one read of each key")
	assert.Equal(t, 1, redistest.CommandCalls(t, admin, "set"), "one write of batch:a for its two calls")
	r, err := store.Take(ctx, "batch:a", rule, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(998), r.Remaining, "both calls on batch:a counted, in one script call")

	require.NoError(t, admin.ScriptFlush(ctx).Err())
	again := []*batchedCall{
		{ctx: ctx, alg: FixedWindow, key: "batch:a", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: "batch:b", arg: testTakeArg()},
	}
	b.exec(ctx, again)
	for _, c := range again {
		require.NoError(t, c.cmd.Err())
	}
	r, err = store.Take(ctx, "batch:a", rule, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(997), r.Remaining)
}

// hashSlot agrees with the server's CLUSTER KEYSLOT, hash tags included.
func TestHashSlot(t *testing.T) {
	admin := redistest.StartCluster(t, 3).Masters[0].Client(t)
	for _, key := range []string{"", "a", "limiter::fw:1m:203.0.113.7", "{user1}:x", "x{}y", "a{b}{c}", "{", "}{a}", "\xff\x00binary"} {
		want, err := admin.ClusterKeySlot(context.Background(), key).Result()
		require.NoError(t, err)
		assert.Equal(t, int(want), hashSlot(key), "%q", key)
	}
}

// A random trace of takes, takes up to a cost, refunds, penalties and
// rewards, on a few keys, decided by batches of 1 to 16 calls (a key often
// several times in one) gives byte for byte the answers of the same calls
// made one by one, on another server: for each algorithm, one limit and
// two, with and without a block and a least interval, on the caller's
// clock.
func TestBatchesMatchOneByOne(t *testing.T) {
	batched, single := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
		for _, rules := range [][]Rule{
			{{Algorithm: alg, Max: 5, Expiration: time.Second}},
			{{Algorithm: alg, Max: 3, Expiration: time.Second}, {Algorithm: alg, Max: 7, Expiration: 5 * time.Second}},
			{{Algorithm: alg, Max: 5, Expiration: time.Second, BlockFor: 700 * time.Millisecond}},
			{{Algorithm: alg, Max: 3, Expiration: time.Second, BlockFor: 300 * time.Millisecond}, {Algorithm: alg, Max: 7, Expiration: 5 * time.Second}},
			{{Algorithm: alg, Max: 5, Expiration: time.Second, MinInterval: 90 * time.Millisecond}},
			{{Algorithm: alg, Max: 3, Expiration: time.Second, BlockFor: 300 * time.Millisecond, MinInterval: 50 * time.Millisecond}, {Algorithm: alg, Max: 7, Expiration: 5 * time.Second}},
		} {
			t.Run(strconv.Itoa(int(alg))+"/"+strconv.Itoa(len(rules))+"/"+rules[0].BlockFor.String()+"/"+rules[0].MinInterval.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(alg), uint64(len(rules))))
				now := time.UnixMilli(1_700_000_000_000)
				store := New(single.Client(t), WithClock(func() time.Time { return now })).engine
				b := newBatcher(batched.Client(t), &pipelineStats{}, false)
				prefix := "trace:" + strconv.Itoa(int(alg)) + ":" + strconv.Itoa(len(rules)) + ":" + rules[0].BlockFor.String() + ":" + rules[0].MinInterval.String() + ":"
				admittedAt := map[string][]Result{} // a key's admitted takes, for refunds
				for step := 0; step < 400; {
					n := 1 + rng.IntN(16)
					var calls []*batchedCall
					var want []string
					for range n {
						key := prefix + strconv.Itoa(rng.IntN(4))
						cost := int64(rng.IntN(4))
						flags, counted := byte(0), []Result(nil)
						switch taken := admittedAt[key]; {
						case len(taken) > 0 && rng.IntN(4) == 0:
							flags, counted = argRefund, taken[:len(rules)]
							admittedAt[key] = taken[len(rules):]
						case rng.IntN(8) == 0:
							flags, cost = argRefund|argPenalty, int64(rng.IntN(12))
						case rng.IntN(8) == 0:
							flags, cost = argRefund|argReward, int64(rng.IntN(12))
						case rng.IntN(8) == 0:
							flags, cost = argUpTo, int64(rng.IntN(12))
						}
						var buf [argMaxSize]byte
						arg, err := store.pack(&buf, rules, cost, flags, counted)
						require.NoError(t, err)
						res, err := runScript(ctx, store.calls, alg, key, string(arg)).Result()
						require.NoError(t, err)
						want = append(want, res)
						calls = append(calls, &batchedCall{ctx: ctx, alg: alg, key: key, arg: string(arg)})
						if flags == 0 {
							results := make([]Result, len(rules))
							if ok, err := decodeResults(res, rules, results); err == nil && ok {
								admittedAt[key] = append(admittedAt[key], results...)
							}
						}
						now = now.Add(time.Duration(rng.IntN(120)) * time.Millisecond)
						step++
					}
					b.exec(ctx, calls)
					for i, c := range calls {
						got, err := c.cmd.Result()
						require.NoError(t, err, "step %d", step-n+i)
						require.Equal(t, want[i], got, "step %d: call %d of a batch of %d", step-n+i, i, n)
					}
				}
			})
		}
	}
}

// Every piece of the single scripts that the batch scripts replace is
// there to replace, the batch scripts make no other call, and the part
// made once per batch reads no call's key or argument.
func TestBatchScriptsReplaceEveryCall(t *testing.T) {
	for alg, src := range scriptSources[FixedWindow:] {
		prelude, _, found := strings.Cut(src, batchPerCall)
		require.True(t, found, "algorithm %d has no %q", alg+1, batchPerCall)
		prelude = regexp.MustCompile(`--[^\n]*`).ReplaceAllString(prelude, "")
		assert.NotContains(t, prelude, "KEYS[")
		assert.NotContains(t, prelude, "ARGV[")
		assert.NotContains(t, prelude, "redis.")
		for _, piece := range batchReplaced {
			assert.Contains(t, src, piece[0], "algorithm %d", alg+1)
		}
		for _, piece := range plainReplaced {
			if alg+1 == int(SlidingLog) {
				assert.NotContains(t, src, piece[0], "the log has no plain take")
			} else {
				assert.Contains(t, src, piece[0], "algorithm %d", alg+1)
			}
		}
		body := batchSources[alg+1][strings.Index(batchSources[alg+1], "local function batch_one"):]
		body = body[:strings.Index(body, "\nend\nlocal answers")]
		for _, call := range regexp.MustCompile(`redis\.p?call\('(\w+)'`).FindAllStringSubmatch(body, -1) {
			assert.Equal(t, "PEXPIRE", call[1], "a call past the batch's reads and writes (algorithm %d)", alg+1)
		}
		assert.NotContains(t, body, "KEYS[")
		assert.NotContains(t, body, "ARGV[")
	}
}

// Out of memory (maxmemory reached, noeviction), a batch decides what it
// would one by one: a denial that writes nothing stands; a call that must
// write fails, and so do the later calls of its key, decided on a value
// never stored; another key's calls are not touched.
func TestBatchOutOfMemory(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 2})
	t.Cleanup(func() { _ = client.Close() })
	store := New(client).engine
	full := Rule{Algorithm: FixedWindow, Max: 1, Expiration: time.Hour}
	_, err := store.Take(ctx, "oom:spent", full, 1)
	require.NoError(t, err)
	b := newBatcher(client, &pipelineStats{}, false)
	warm := []*batchedCall{ // loads the batch script, as any batch before the memory ran out has
		{ctx: ctx, alg: FixedWindow, key: "oom:warm", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: "oom:warm", arg: testTakeArg()},
	}
	b.exec(ctx, warm)
	require.NoError(t, warm[1].cmd.Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })

	var buf [argMaxSize]byte
	spent, err := store.pack(&buf, []Rule{full}, 1, 0, nil)
	require.NoError(t, err)
	spentArg := string(spent)
	calls := []*batchedCall{
		{ctx: ctx, alg: FixedWindow, key: "oom:spent", arg: spentArg},
		{ctx: ctx, alg: FixedWindow, key: "oom:fresh", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: "oom:fresh", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: "oom:spent", arg: spentArg},
	}
	b.exec(ctx, calls)
	for _, i := range []int{0, 3} {
		res, err := calls[i].cmd.Result()
		require.NoError(t, err, "call %d: a denial writes nothing", i)
		ok, err := decodeResults(res, []Rule{full}, make([]Result, 1))
		require.NoError(t, err)
		assert.False(t, ok)
	}
	for _, i := range []int{1, 2} {
		assert.True(t, goredis.HasErrorPrefix(calls[i].cmd.Err(), "OOM"), "call %d: %v", i, calls[i].cmd.Err())
		var reply goredis.Error
		assert.ErrorAs(t, calls[i].cmd.Err(), &reply, "an error reply, as the breaker tells them")
	}
}

// A pipeline's calls of one algorithm go in batches of at most maxBatch,
// in order.
func TestBatchesAreBounded(t *testing.T) {
	ctx := context.Background()
	var calls []*batchedCall
	for i := range 3*maxBatch + 5 {
		calls = append(calls, &batchedCall{ctx: ctx, alg: FixedWindow, key: "k" + strconv.Itoa(i%7)})
	}
	groups := groupCalls(calls, false, true)
	require.Len(t, groups, 4)
	next := 0
	for _, g := range groups {
		assert.LessOrEqual(t, len(g.calls), maxBatch)
		for _, c := range g.calls {
			assert.Same(t, calls[next], c)
			next++
		}
	}
}

// Redis stalled (CLIENT PAUSE) or killed while batches are in flight: a
// caller waiting in a batch returns once its own deadline passes, never
// much later, with its context's error or the connection's; only the calls
// a batcher sent alone (at most maxInFlight at once) wait on the client's
// ReadTimeout, as go-redis's own calls do. Once Redis is back, calls are
// decided there again, exactly.
func TestBatchCallersKeepTheirDeadlines(t *testing.T) {
	const (
		callers     = 32
		deadline    = 300 * time.Millisecond
		slack       = 400 * time.Millisecond // a loaded machine's scheduling
		readTimeout = 2500 * time.Millisecond
		stalled     = 1200 * time.Millisecond
	)
	for _, stall := range []string{"paused", "killed"} {
		t.Run(stall, func(t *testing.T) {
			server := redistest.Start(t)
			client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 8, ReadTimeout: readTimeout, MaxRetries: -1})
			t.Cleanup(func() { _ = client.Close() })
			store := New(client).engine
			rule := Rule{Algorithm: FixedWindow, Max: 1 << 30, Expiration: time.Hour}
			_, err := store.Take(context.Background(), "warm", rule, 1)
			require.NoError(t, err)

			var stop atomic.Bool
			var calls, failed, late atomic.Int64
			var slowest atomic.Int64
			var wg sync.WaitGroup
			for g := range callers {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						ctx, cancel := context.WithTimeout(context.Background(), deadline)
						start := time.Now()
						_, err := store.Take(ctx, "k"+strconv.Itoa((g+i)%8), rule, 1)
						took := time.Since(start)
						cancel()
						calls.Add(1)
						if err != nil {
							failed.Add(1)
						}
						if took > deadline+slack {
							late.Add(1)
						}
						for old := slowest.Load(); int64(took) > old && !slowest.CompareAndSwap(old, int64(took)); old = slowest.Load() {
						}
					}
				})
			}
			time.Sleep(300 * time.Millisecond) // batches under way
			switch stall {
			case "paused":
				admin := server.Client(t)
				require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", stalled.Milliseconds(), "ALL").Err())
				time.Sleep(stalled + 300*time.Millisecond)
			case "killed":
				server.Stop()
				time.Sleep(stalled)
				server.Restart()
				time.Sleep(300 * time.Millisecond)
			}
			stop.Store(true)
			wg.Wait()
			t.Logf("%d calls, %d failed, %d past deadline+%v, slowest %v", calls.Load(), failed.Load(), late.Load(), slack, time.Duration(slowest.Load()))
			assert.Positive(t, failed.Load(), "no call noticed the stall")
			maxInFlight := int64(store.pipes.one.maxInFlight)
			assert.LessOrEqual(t, late.Load(), maxInFlight, "calls that waited past their deadline: only those sent alone may")
			assert.Less(t, time.Duration(slowest.Load()), readTimeout+slack)

			// Back: a fresh key is limited exactly. go-redis's pool keeps
			// refusing to dial for a while after a run of failed dials, so a
			// call that could not connect (it ran nothing) is made again.
			exact := Rule{Algorithm: FixedWindow, Max: 50, Expiration: time.Hour}
			var admitted atomic.Int64
			for range callers {
				wg.Go(func() {
					for range 5 {
						var r Result
						var err error
						for try := 0; try == 0 || err != nil && isDial(err) && try < 100; try++ {
							if try > 0 {
								time.Sleep(50 * time.Millisecond)
							}
							r, err = store.Take(context.Background(), "after", exact, 1)
						}
						if assert.NoError(t, err) && r.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(50), admitted.Load())
		})
	}
}

// isDial tells whether err is a failure to connect: the call was not sent.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
