package quota

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// concurrencyReplicas returns n Concurrency values of cfg on srv, each with
// a client of its own, as replicas of one service would be.
func concurrencyReplicas(t *testing.T, srv *redistest.Server, n int, cfg ConcurrencyConfig) []*Concurrency {
	t.Helper()
	cs := make([]*Concurrency, n)
	for i := range cs {
		c := cfg
		c.Redis = srv.Client(t)
		if c.Name == "" {
			c.Name = "replicas" // one limiter on many replicas: one Name
		}
		if c.StorageTimeout == 0 {
			c.StorageTimeout = slowMachine
		}
		cs[i] = newMemoryConcurrency(t, c)
	}
	return cs
}

// slotsKey is where a Concurrency of cfg, made by concurrencyReplicas,
// keeps key's slots in Redis.
func slotsKey(cfg ConcurrencyConfig, key string) string {
	prefix := cfg.KeyPrefix
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if cfg.Name == "" {
		cfg.Name = "replicas"
	}
	return prefix + cfg.Name + ":slots{" + key + "}"
}

// Three replicas, 30 callers at once, Max 3, each admitted one holding its
// slot for 400 ms after all have had their answer: exactly 3 admitted
// across the replicas, never more than 3 in flight, and nothing left in
// Redis once they are released.
func TestConcurrencyRedisReplicasAdmitMax(t *testing.T) {
	srv := redistest.Start(t)
	cs := concurrencyReplicas(t, srv, 3, ConcurrencyConfig{Max: 3})
	admitted, most := heldAtOnce(t, 30, 400*time.Millisecond, func(i int) *Concurrency { return cs[i%3] })
	assert.Equal(t, int64(3), admitted)
	assert.LessOrEqual(t, most, int64(3))
	n, err := srv.Client(t).Exists(context.Background(), slotsKey(ConcurrencyConfig{}, "k")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no slot left")
	for _, c := range cs {
		assert.Nil(t, c.local.shards[0].keys["k"], "Redis answered, not the fallback")
	}
}

// Release on Redis frees exactly its own slot, once.
func TestConcurrencyRedisRelease(t *testing.T) {
	srv := redistest.Start(t)
	cs := concurrencyReplicas(t, srv, 2, ConcurrencyConfig{Max: 2})
	ctx := context.Background()
	a := requireSlot(t, cs[0], "k", true, 1)
	requireSlot(t, cs[1], "k", true, 0)
	rejected := requireSlot(t, cs[1], "k", false, 0)
	cp := a
	require.NoError(t, cs[0].Release(ctx, &a))
	require.NoError(t, cs[0].Release(ctx, &a))
	require.NoError(t, cs[0].Release(ctx, &cp))
	require.NoError(t, cs[1].Release(ctx, &rejected))
	requireSlot(t, cs[1], "k", true, 0)
	requireSlot(t, cs[0], "k", false, 0)
}

// A replica that takes every slot and dies (its client closed, nothing
// released) holds the others off until Expiration, then its slots come
// back: every attempt answered before then is rejected.
func TestConcurrencyRedisDeadReplicaSlotsExpire(t *testing.T) {
	const expiration = time.Second
	srv := redistest.Start(t)
	cfg := ConcurrencyConfig{Max: 3, Expiration: expiration, Name: "dead", StorageTimeout: slowMachine}
	live := concurrencyReplicas(t, srv, 2, cfg)
	deadClient := srv.Client(t)
	cfg.Redis = deadClient
	dead := newMemoryConcurrency(t, cfg)
	before := time.Now()
	for range 3 {
		s, err := dead.Acquire(context.Background(), "k")
		require.NoError(t, err)
		require.True(t, s.Allowed())
	}
	require.NoError(t, deadClient.Close())
	// Redis decides in whole ms: a slot may come back up to 1 ms early by
	// this process's clock.
	slack := expiration - 2*time.Millisecond
	rejected := 0
	for i := 0; ; i++ {
		require.Less(t, time.Since(before), 20*expiration, "the dead replica's slots never came back")
		s, err := live[i%2].Acquire(context.Background(), "k")
		require.NoError(t, err)
		require.Equal(t, SourceBackend, s.Source())
		answered := time.Since(before)
		if !s.Allowed() {
			rejected++
			time.Sleep(50 * time.Millisecond)
			continue
		}
		require.GreaterOrEqual(t, answered, slack, "admitted before the dead replica's slots expired")
		require.NoError(t, live[i%2].Release(context.Background(), &s))
		t.Logf("admitted %v after the dead replica took its slots, after %d rejections", answered, rejected)
		break
	}
	assert.Positive(t, rejected)
}

// A dead replica's slot expires while another replica's, taken later,
// keeps the key alive: the expired one is free after Expiration, the live
// one still counted.
func TestConcurrencyRedisExpiredSlotAmongLive(t *testing.T) {
	const expiration = 3 * time.Second
	srv := redistest.Start(t)
	cs := concurrencyReplicas(t, srv, 2, ConcurrencyConfig{Max: 2, Expiration: expiration})
	requireSlot(t, cs[0], "k", true, 1) // never released
	time.Sleep(expiration / 3)
	live := requireSlot(t, cs[1], "k", true, 0)
	requireSlot(t, cs[1], "k", false, 0)
	// The dead replica's slot comes back (polled: when depends on when
	// Redis counted it); the live one, a second younger, still counts.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := cs[1].Acquire(context.Background(), "k")
		require.NoError(t, err)
		if s.Allowed() {
			defer func() { require.NoError(t, cs[1].Release(context.Background(), &s)) }()
			break
		}
		require.True(t, time.Now().Before(deadline), "the dead replica's slot never expired")
		time.Sleep(50 * time.Millisecond)
	}
	requireSlot(t, cs[1], "k", false, 0)
	require.NoError(t, cs[1].Release(context.Background(), &live))
}

// waitAll runs callers of AcquireWait for one key, each on replica i%n
// with maxDelay, holding an admitted slot for hold, and returns how many
// were admitted and the most in flight at once.
func waitAll(t *testing.T, cs []*Concurrency, callers int, maxDelay, hold time.Duration) (admitted, most int64) {
	t.Helper()
	var inFlight, peak, ok atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[i%len(cs)]
			s, err := c.AcquireWait(context.Background(), "k", maxDelay)
			if !assert.NoError(t, err) || !s.Allowed() {
				return
			}
			ok.Add(1)
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(hold)
			inFlight.Add(-1)
			assert.NoError(t, c.Release(context.Background(), &s))
		}()
	}
	wg.Wait()
	return ok.Load(), peak.Load()
}

// AcquireWait on two replicas, Max 1: with time enough every caller gets
// the slot in turn, never two at once; with too little, those whose
// maxDelay ends while another holds the slot are rejected, not before.
func TestConcurrencyRedisAcquireWait(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("time enough", func(t *testing.T) {
		cs := concurrencyReplicas(t, srv, 2, ConcurrencyConfig{Max: 1, Name: "enough"})
		admitted, most := waitAll(t, cs, 5, 3*time.Second, 200*time.Millisecond)
		assert.Equal(t, int64(5), admitted)
		assert.Equal(t, int64(1), most)
	})
	t.Run("too little", func(t *testing.T) {
		cs := concurrencyReplicas(t, srv, 2, ConcurrencyConfig{Max: 1, Name: "little"})
		ctx := context.Background()
		held := requireSlot(t, cs[0], "k", true, 0)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				s, err := cs[i%2].AcquireWait(ctx, "k", 100*time.Millisecond)
				assert.NoError(t, err)
				assert.False(t, s.Allowed())
				assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "rejected before its maxDelay")
			}()
		}
		wg.Wait() // the slot held all along
		require.NoError(t, cs[0].Release(ctx, &held))
	})
}

// A waiter whose context is canceled returns its error and holds no slot;
// MaxWaiting bounds the waiters of a process, the next rejected at once.
func TestConcurrencyRedisAcquireWaitBounds(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	cs := concurrencyReplicas(t, srv, 2, ConcurrencyConfig{Max: 1, MaxWaiting: 2})
	held := requireSlot(t, cs[1], "k", true, 0)

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	s, err := cs[0].AcquireWait(cctx, "k", time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, s.Allowed())

	got := make(chan Slot, 2)
	for range 2 {
		go func() {
			s, err := cs[0].AcquireWait(ctx, "k", time.Minute)
			assert.NoError(t, err)
			got <- s
		}()
	}
	require.Eventually(t, func() bool { return cs[0].waiters.waiting.Load() == 2 }, 10*time.Second, time.Millisecond)
	// Beyond MaxWaiting: rejected at once, not at its maxDelay (nor at
	// the context's deadline, which would be an error).
	short, cancelShort := context.WithTimeout(ctx, 10*time.Second)
	defer cancelShort()
	third, err := cs[0].AcquireWait(short, "k", time.Minute)
	require.NoError(t, err)
	assert.False(t, third.Allowed(), "beyond MaxWaiting")
	require.NoError(t, cs[1].Release(ctx, &held)) // another replica's: found by polling
	for range 2 {
		s := <-got
		require.True(t, s.Allowed())
		n, err := srv.Client(t).ZCard(ctx, slotsKey(ConcurrencyConfig{}, "k")).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the canceled waiter holds nothing")
		require.NoError(t, cs[0].Release(ctx, &s))
	}
}

// Keys of any bytes and length have slots of their own in Redis, under
// the slots' prefix.
func TestConcurrencyRedisHostileKeys(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	c := concurrencyReplicas(t, srv, 1, ConcurrencyConfig{Max: 1})[0]
	keys := []string{"", strings.Repeat("x", 1<<20), "\x00\xff{}:\n", "}{", "k"}
	held := make([]Slot, len(keys))
	for i, k := range keys {
		held[i] = requireSlot(t, c, k, true, 0)
		n, err := admin.ZCard(ctx, slotsKey(ConcurrencyConfig{}, k)).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
	}
	for _, k := range keys {
		requireSlot(t, c, k, false, 0)
	}
	for i := range held {
		require.NoError(t, c.Release(ctx, &held[i]))
	}
	n, err := admin.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "every set gone with its last slot")
}

// A key whose Redis value is of another type is an error for that key
// alone (FailError returns it; FailFallback answers in memory); other keys
// are decided by Redis, and the foreign value expires within Expiration,
// after which the key has its slots.
func TestConcurrencyRedisWrongType(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, policy := range []FailurePolicy{FailError, FailFallback} {
		t.Run(policy.String(), func(t *testing.T) {
			cfg := ConcurrencyConfig{Max: 1, Expiration: time.Second, Name: policy.String(), FailurePolicy: policy}
			var reports atomic.Int64
			cfg.OnStorageError = func(err error) {
				reports.Add(1)
				assert.ErrorContains(t, err, "WRONGTYPE")
			}
			c := concurrencyReplicas(t, srv, 1, cfg)[0]
			require.NoError(t, admin.Set(ctx, slotsKey(cfg, "string"), "x", 0).Err())
			require.NoError(t, admin.HSet(ctx, slotsKey(cfg, "hash"), "f", "v").Err())
			for _, key := range []string{"string", "hash"} {
				s, err := c.Acquire(ctx, key)
				if policy == FailError {
					require.ErrorContains(t, err, "WRONGTYPE")
					assert.False(t, s.Allowed())
				} else {
					require.NoError(t, err)
					assert.Equal(t, SourceFallback, s.Source())
					require.NoError(t, c.Release(ctx, &s))
				}
				ttl, err := admin.PTTL(ctx, slotsKey(cfg, key)).Result()
				require.NoError(t, err)
				assert.Positive(t, ttl)
				assert.LessOrEqual(t, ttl, time.Second)
				ok := requireSlot(t, c, "other", true, 0)
				require.Equal(t, SourceBackend, ok.Source())
				require.NoError(t, c.Release(ctx, &ok))
			}
			assert.Positive(t, reports.Load())
			require.Eventually(t, func() bool {
				s, err := c.Acquire(ctx, "string")
				if err != nil || s.Source() != SourceBackend {
					return false
				}
				assert.True(t, s.Allowed())
				return assert.NoError(t, c.Release(ctx, &s))
			}, 20*time.Second, 50*time.Millisecond)
		})
	}
}

// A Redis killed under a Concurrency: each FailurePolicy answers, without
// a panic; FailFallback's slots are this process's; Release of a slot
// taken before reports its error.
func TestConcurrencyRedisKilled(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []FailurePolicy{FailFallback, FailOpen, FailClosed, FailError} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			var reports atomic.Int64
			cfg := ConcurrencyConfig{Max: 1, FailurePolicy: policy, StorageTimeout: 200 * time.Millisecond,
				OnStorageError: func(error) { reports.Add(1) }}
			c := concurrencyReplicas(t, srv, 1, cfg)[0]
			before := requireSlot(t, c, "taken", true, 0)
			srv.Stop()
			assert.Error(t, c.Release(ctx, &before), "a release that did not reach Redis")
			for i := range 8 { // past the breaker's threshold
				s, err := c.Acquire(ctx, "k")
				switch policy {
				case FailError:
					require.Error(t, err)
					assert.False(t, s.Allowed())
				case FailFallback:
					require.NoError(t, err)
					assert.Equal(t, SourceFallback, s.Source())
					assert.Equal(t, i == 0, s.Allowed(), "the fallback's one slot")
				case FailOpen:
					require.NoError(t, err)
					assert.True(t, s.Allowed())
					assert.Equal(t, SourceFailOpen, s.Source())
				case FailClosed:
					require.NoError(t, err)
					assert.False(t, s.Allowed())
					assert.Equal(t, SourceFailClosed, s.Source())
					assert.Equal(t, time.Second, s.RetryAfter())
				}
			}
			s, err := c.AcquireWait(ctx, "w", 100*time.Millisecond)
			if policy == FailError {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, policy != FailClosed, s.Allowed())
				require.NoError(t, c.Release(ctx, &s))
			}
			assert.Positive(t, reports.Load(), "failures reported")
		})
	}
}

func BenchmarkConcurrencyRedis(b *testing.B) {
	srv := redistest.Start(b)
	c, err := NewConcurrency(ConcurrencyConfig{Max: 3, Redis: srv.Client(b)})
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := c.Acquire(ctx, "client-1")
		if err != nil || !s.Allowed() {
			b.Fatal(err, s.Allowed())
		}
		_ = c.Release(ctx, &s)
	}
}
