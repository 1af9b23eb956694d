package redis

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Callers deciding at the same time share pipelines: 64 goroutines making
// 100 Takes each on one key send far fewer pipelines than calls, and the
// limit still holds exactly. With WithoutPipelining it sends none.
func TestConcurrentCallsSharePipelines(t *testing.T) {
	server := redistest.Start(t)
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "unpipelined"}[pipelined], func(t *testing.T) {
			client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 8})
			t.Cleanup(func() { _ = client.Close() })
			var opts []Option
			if !pipelined {
				opts = append(opts, WithoutPipelining())
			}
			store := New(client, opts...).engine
			const callers, each, limit = 64, 100, 1000
			rule := Rule{Algorithm: FixedWindow, Max: limit, Expiration: time.Hour}
			key := "shared-" + t.Name()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						r, err := store.Take(context.Background(), key, rule, 1)
						if !assert.NoError(t, err) {
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(limit), admitted.Load())
			pipelines, calls := store.pipelineStats()
			t.Logf("%d calls in %d pipelines", calls, pipelines)
			if !pipelined {
				assert.Zero(t, pipelines+calls)
				return
			}
			assert.Equal(t, int64(callers*each), calls)
			assert.Greater(t, float64(calls)/float64(pipelines), 2.0, "calls per write: 1 without coalescing")
		})
	}
}

// On a Redis Cluster, each master gets pipelines of its own: concurrent
// calls on keys of every master share writes, every key is limited
// exactly, and the Store keeps one batcher per master.
func TestClusterPipelinesPerNode(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t)).engine
	const callers, keys, limit = 96, 300, 3
	rule := Rule{Algorithm: FixedWindow, Max: limit, Expiration: time.Hour}
	admitted := takeConcurrently(t, store, rule, callers, keys*(limit+2)/callers*4, keys, "node-", func(g, i int) int { return (g*7919 + i) % keys })
	for k := range admitted {
		require.Equal(t, int64(limit), admitted[k], "key %d", k)
	}
	nodes := 0
	store.pipes.nodes.Range(func(any, any) bool { nodes++; return true })
	assert.Equal(t, 3, nodes, "one batcher per master")
	pipelines, calls := store.pipelineStats()
	t.Logf("%d calls in %d writes over %d nodes", calls, pipelines, nodes)
	assert.Greater(t, float64(calls)/float64(pipelines), 1.5, "calls per write: 1 without coalescing")
}

// A call sent to a node that does not hold its key's slot (a stale view of
// the cluster, as while slots move) gets MOVED from that node, and goes on
// through the cluster client, which follows the redirection: the caller
// gets the script's answer, not the error.
func TestClusterMovedGoesThroughClusterClient(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	store := New(client).engine
	wrong, err := client.MasterForKey(context.Background(), "anchor")
	require.NoError(t, err)
	store.pipes.node = func(context.Context, string) (*goredis.Client, error) { return wrong, nil }
	rule := Rule{Algorithm: TokenBucket, Max: 2, Expiration: time.Hour}
	moved := 0
	for i := range 30 {
		key := "moved-" + strconv.Itoa(i)
		owner, err := client.MasterForKey(context.Background(), key)
		require.NoError(t, err)
		if owner != wrong {
			moved++
		}
		for j := range 3 {
			r, err := store.Take(context.Background(), key, rule, 1)
			require.NoError(t, err, "key %s", key)
			assert.Equal(t, j < 2, r.Allowed, "key %s take %d", key, j)
		}
	}
	assert.Greater(t, moved, 10, "keys on other masters than the stale one")
}

// On a Ring, each shard gets pipelines of its own, and each key is limited
// exactly on the shard that holds it.
func TestRingPipelinesPerShard(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	store := New(ring).engine
	const callers, keys, limit = 32, 100, 2
	rule := Rule{Algorithm: SlidingWindow, Max: limit, Expiration: time.Hour}
	admitted := takeConcurrently(t, store, rule, callers, keys, keys, "ring-", func(g, i int) int { return (g + i) % keys })
	for k := range admitted {
		require.Equal(t, int64(limit), admitted[k], "key %d", k)
	}
	shards := 0
	store.pipes.nodes.Range(func(any, any) bool { shards++; return true })
	assert.Equal(t, 2, shards, "one batcher per shard")
	for _, s := range []*redistest.Server{a, b} {
		n, err := s.Client(t).DBSize(context.Background()).Result()
		require.NoError(t, err)
		assert.Greater(t, n, int64(20), "shard %s holds too few of the %d keys", s.Addr(), keys)
	}
}

// takeConcurrently has callers goroutines make each Takes of cost 1 under
// rule, the i-th of goroutine g on key prefix+keyOf(g, i), and returns how
// many were admitted per key index (of keys).
func takeConcurrently(t *testing.T, store *engine, rule Rule, callers, each, keys int, prefix string, keyOf func(g, i int) int) []int64 {
	t.Helper()
	admitted := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := keyOf(g, i)
				r, err := store.Take(context.Background(), prefix+strconv.Itoa(k), rule, 1)
				if !assert.NoError(t, err) {
					return
				}
				if r.Allowed {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out := make([]int64, keys)
	for k := range admitted {
		out[k] = admitted[k].Load()
	}
	return out
}

// A pipeline whose first call gets an error reply that go-redis retries
// (CLUSTERDOWN, for a slot no master serves) is not sent again whole: the
// other calls in it run once. The Store puts a PING first for that.
func TestRetriedFirstReplyDoesNotRunThePipelineAgain(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	require.NoError(t, client.ForEachShard(ctx, func(ctx context.Context, c *goredis.Client) error {
		return c.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err()
	}))
	node, err := client.MasterForKey(ctx, "{orphan}")
	require.NoError(t, err)
	slot := client.ClusterKeySlot(ctx, "{orphan}").Val()
	var other string // a key on the same master, in another slot
	for i := 0; other == ""; i++ {
		k := "neighbour-" + strconv.Itoa(i)
		n, err := client.MasterForKey(ctx, k)
		require.NoError(t, err)
		if n == node && client.ClusterKeySlot(ctx, k).Val() != slot {
			other = k
		}
	}
	require.NoError(t, node.Do(ctx, "CLUSTER", "DELSLOTS", slot).Err())
	require.NoError(t, node.ScriptLoad(ctx, scriptSources[FixedWindow]).Err())

	rule := Rule{Algorithm: FixedWindow, Max: 1000, Expiration: time.Hour}
	batch := []*batchedCall{
		{ctx: ctx, alg: FixedWindow, key: "{orphan}", arg: testTakeArg()},
		{ctx: ctx, alg: FixedWindow, key: other, arg: testTakeArg()},
	}
	newBatcher(node, &pipelineStats{}, true).exec(ctx, batch)
	assert.True(t, goredis.HasErrorPrefix(batch[0].cmd.Err(), "CLUSTERDOWN"), "first: %v", batch[0].cmd.Err())
	require.NoError(t, batch[1].cmd.Err())
	r, err := New(client, WithoutPipelining()).engine.Take(ctx, other, rule, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(999), r.Remaining, "the second call ran %d times", 1000-r.Remaining)
}

// Shard changes on a Ring replace a shard's client: the Store keeps one
// batcher per address, not one per client it has ever seen.
func TestRingShardChangesKeepOneBatcherPerAddress(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"s": a.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	store := New(ring).engine
	rule := Rule{Algorithm: FixedWindow, Max: 100, Expiration: time.Hour}
	for i := range 20 {
		addr := a.Addr()
		if i%2 == 1 {
			addr = b.Addr()
		}
		ring.SetAddrs(map[string]string{"s": addr})
		_, err := store.Take(context.Background(), "shard-change", rule, 1)
		require.NoError(t, err, "change %d", i)
	}
	n := 0
	store.pipes.nodes.Range(func(any, any) bool { n++; return true })
	assert.LessOrEqual(t, n, 2)
}

// testTakeArg is the packed argument of a take of cost 1 under Limit 1000
// per hour, on the server's clock.
func testTakeArg() string {
	var arg [argHeadSize + argRuleSize]byte
	arg[0] = argServerTime
	putUint(arg[1:6], 1)
	binary.LittleEndian.PutUint32(arg[12:], 1000)
	binary.LittleEndian.PutUint32(arg[16:], 1000)
	putUint(arg[20:27], uint64(time.Hour/time.Millisecond))
	binary.LittleEndian.PutUint32(arg[27:], 1) // a step of 1 ms
	return string(arg[:])
}

type ctxKey struct{}

// A pipeline's context is made of the calls whose callers still wait: their
// latest deadline (none if one has none) and the first one's values. It
// does not end by itself before then: it ends when one of its callers
// gives up, so that go-redis, which resends a pipeline while its context
// lasts, never resends a call whose caller left.
func TestBatchContext(t *testing.T) {
	const soon, later = 60 * time.Millisecond, time.Hour
	type callSpec struct {
		value string
		d     time.Duration // deadline from now; 0: none
		left  bool          // the caller has left already
	}
	for _, tc := range []struct {
		name         string
		calls        []callSpec
		wantDeadline time.Duration // from now; 0: none
		wantValue    string
		givesUp      int // index of a waiting caller that gives up
	}{
		{"one deadline", []callSpec{{"a", soon, false}}, soon, "a", 0},
		{"the latest deadline", []callSpec{{"a", later, false}, {"b", soon, false}}, later, "a", 1},
		{"one without a deadline", []callSpec{{"a", soon, false}, {"b", 0, false}}, 0, "a", 1},
		{"callers that left do not count", []callSpec{{"gone", 0, true}, {"b", soon, true}, {"c", later, false}}, later, "c", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			var calls []*batchedCall
			for _, c := range tc.calls {
				ctx := context.WithValue(context.Background(), ctxKey{}, c.value)
				cancel := context.CancelFunc(func() {})
				if c.d != 0 {
					ctx, cancel = context.WithDeadline(ctx, now.Add(c.d))
				}
				if c.left {
					ctx, cancel = context.WithCancel(ctx)
					cancel()
				}
				defer cancel()
				calls = append(calls, &batchedCall{ctx: ctx})
			}
			ctx, cancel := batchContext(calls)
			defer cancel()
			d, ok := ctx.Deadline()
			assert.Equal(t, tc.wantDeadline != 0, ok, "has a deadline")
			if ok {
				assert.True(t, d.Equal(now.Add(tc.wantDeadline)), "deadline %v from now, want %v", d.Sub(now), tc.wantDeadline)
			}
			assert.Equal(t, tc.wantValue, ctx.Value(ctxKey{}))
			require.NoError(t, ctx.Err(), "ended at once")
			calls[tc.givesUp].giveUp()
			assert.Error(t, ctx.Err(), "a caller that gives up ends it")
		})
	}
	// A call not yet in a pipeline has nothing to end.
	(&batchedCall{ctx: context.Background()}).giveUp()
}

// pipelineWatch holds back a batcher's first call (sent alone) until
// release is closed, and reports whether a pipeline's context ends while
// the pipeline waits to be sent.
type pipelineWatch struct {
	release, started chan struct{}
	ended            chan bool
}

func (pipelineWatch) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (w pipelineWatch) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		<-w.release
		return next(ctx, cmd)
	}
}
func (w pipelineWatch) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		scripts := false // not go-redis's own pipelines, as when it opens a connection
		for _, cmd := range cmds {
			scripts = scripts || cmd.Name() == "evalsha"
		}
		if !scripts {
			return next(ctx, cmds)
		}
		close(w.started)
		select {
		case <-ctx.Done():
			w.ended <- true
		case <-time.After(10 * time.Second):
			w.ended <- false
		}
		return next(ctx, cmds)
	}
}

// A caller that gives up on a call already sent in a pipeline (here, by
// cancelling a context without a deadline) ends that pipeline's context, so
// that go-redis does not send it again: the one slot in flight is held by a
// first call, two more queue and go out in a pipeline once the slot frees,
// and the caller of one of them then leaves. The other call of that
// pipeline fails with it, as a call that ran late (Redis may have run
// it), not as one canceled: its caller still waited.
func TestCallerGivingUpEndsItsPipeline(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	watch := pipelineWatch{release: make(chan struct{}), started: make(chan struct{}), ended: make(chan bool, 1)}
	client.AddHook(watch)
	b := newBatcher(client, &pipelineStats{}, false)
	b.maxInFlight = 1

	firstDone := make(chan error, 1)
	go func() {
		_, err := b.run(context.Background(), TokenBucket, "first", []byte(testTakeArg()))
		firstDone <- err
	}()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.inFlight == 1 }, 5*time.Second, time.Millisecond)

	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	secondDone, thirdDone := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := b.run(ctx, TokenBucket, "second", []byte(testTakeArg()))
		secondDone <- err
	}()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 1 }, 5*time.Second, time.Millisecond)
	go func() {
		_, err := b.run(context.Background(), TokenBucket, "third", []byte(testTakeArg()))
		thirdDone <- err
	}()
	require.Eventually(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) == 2 }, 5*time.Second, time.Millisecond)
	close(watch.release)
	require.NoError(t, <-firstDone)
	<-watch.started
	giveUp()
	assert.ErrorIs(t, <-secondDone, context.Canceled)
	assert.True(t, <-watch.ended, "the pipeline's context outlived a caller that left")
	err := <-thirdDone
	require.ErrorIs(t, err, errCutOff, "the other call fails with the pipeline")
	assert.ErrorIs(t, err, context.DeadlineExceeded, "read as a call that ran late")
}

// noscriptHook calls onNoscript after a pipeline in which a command got
// NOSCRIPT, before the pipeline's caller sees the replies.
type noscriptHook struct{ onNoscript func() }

func (noscriptHook) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (noscriptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h noscriptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if goredis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				h.onNoscript()
				break
			}
		}
		return err
	}
}

// After SCRIPT FLUSH, a pipeline's EVALSHA calls get NOSCRIPT and go again
// as EVAL, except the call of a caller that left in between: it is not
// sent again, so counts nothing, and gets its context's error. The other
// call runs once, under a context of its own: the first pipeline's ended
// with the caller that left.
func TestPipelineDoesNotResendForACallerThatLeft(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	ctx := context.Background()
	require.NoError(t, client.ScriptFlush(ctx).Err())
	leftCtx, leave := context.WithCancel(ctx)
	defer leave()
	left := &batchedCall{ctx: leftCtx, alg: TokenBucket, key: "left", arg: testTakeArg(), done: make(chan struct{})}
	stays := &batchedCall{ctx: ctx, alg: TokenBucket, key: "stays", arg: testTakeArg(), done: make(chan struct{})}
	batchCtx, cancelBatch := batchContext([]*batchedCall{left, stays})
	defer cancelBatch()
	client.AddHook(noscriptHook{onNoscript: func() {
		leave()
		left.giveUp() // as its caller does when it stops waiting
	}})

	newBatcher(client, &pipelineStats{}, false).exec(batchCtx, []*batchedCall{left, stays})

	assert.ErrorIs(t, left.cmd.Err(), context.Canceled)
	require.NoError(t, stays.cmd.Err())
	for _, c := range []*batchedCall{left, stays} {
		select {
		case <-c.done:
		default:
			t.Errorf("%s: caller not woken", c.key)
		}
	}
	n, err := client.Exists(ctx, "left").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the call of the caller that left ran")
	r, err := New(client, WithoutPipelining()).engine.Take(ctx, "stays", Rule{Algorithm: TokenBucket, Max: 1000, Expiration: time.Hour}, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(999), r.Remaining, "the other call ran %d times", 1000-r.Remaining)
}
