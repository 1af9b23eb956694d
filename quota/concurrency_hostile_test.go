package quota

import (
	"context"
	"math"
	"math/rand/v2"
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

// Releasing one request's slot twice, through a copy of its Slot, or from
// goroutines each with its own copy, frees that one slot only: the other
// requests keep theirs.
func TestConcurrencyReleaseFreesOnlyItsOwnSlot(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := ConcurrencyConfig{Max: 3, Name: "own"}
			var c *Concurrency
			if backend == "redis" {
				c = concurrencyReplicas(t, srv, 1, cfg)[0]
			} else {
				c = newMemoryConcurrency(t, cfg)
			}
			a := requireSlot(t, c, "k", true, 2)
			requireSlot(t, c, "k", true, 1)
			requireSlot(t, c, "k", true, 0)
			copies := []Slot{a, a, a, a}
			require.NoError(t, c.Release(ctx, &a))
			require.NoError(t, c.Release(ctx, &a))
			var wg sync.WaitGroup
			for i := range copies {
				wg.Go(func() { assert.NoError(t, c.Release(ctx, &copies[i])) })
			}
			wg.Wait()
			requireSlot(t, c, "k", true, 0)
			requireSlot(t, c, "k", false, 0)
		})
	}
}

// Replicas on one Redis, many callers of one key with random hold times,
// some waiting (AcquireWait, some of them giving up), some releasing
// twice: never more than Max in flight, and the key's set is empty after.
func TestConcurrencyRedisHammerNeverOverMax(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cfg := ConcurrencyConfig{Max: 3, Name: "hammer", FailurePolicy: FailClosed}
	cs := concurrencyReplicas(t, srv, 3, cfg)
	var inFlight, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			c := cs[i%len(cs)]
			for range 15 {
				var s Slot
				var err error
				if rand.N(2) == 0 {
					wctx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(30))*time.Millisecond)
					s, err = c.AcquireWait(wctx, "k", time.Second)
					cancel()
				} else {
					s, err = c.Acquire(ctx, "k")
				}
				if err != nil || !s.Allowed() {
					continue
				}
				assert.Equal(t, SourceBackend, s.Source())
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				admitted.Add(1)
				time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
				inFlight.Add(-1)
				dup := s
				assert.NoError(t, c.Release(ctx, &s))
				assert.NoError(t, c.Release(ctx, &dup))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(cfg.Max))
	assert.Positive(t, admitted.Load())
	n, err := admin.ZCard(ctx, slotsKey(cfg, "k")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "slots left in Redis")
}

// Keys of any bytes and length (empty, 1 MB, binary, with braces) each
// get their slots and give them all back: Redis keeps no set and memory
// no key.
func TestConcurrencyHostileKeysLeaveNothing(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	keys := []string{"", strings.Repeat("x", 1<<20), "\x00\xff}{\r\n", "}", "{", "a}b{c"}
	cfg := ConcurrencyConfig{Max: 2, Name: "keys"}
	mem := newMemoryConcurrency(t, cfg)
	red := concurrencyReplicas(t, srv, 1, cfg)[0]
	for _, c := range []*Concurrency{mem, red} {
		var held []Slot
		for _, key := range keys {
			held = append(held, requireSlot(t, c, key, true, 1), requireSlot(t, c, key, true, 0))
			requireSlot(t, c, key, false, 0)
		}
		for i := range held {
			require.NoError(t, c.Release(ctx, &held[i]))
		}
	}
	assert.Zero(t, mem.local.keyCount())
	assert.Zero(t, red.local.keyCount())
	left, err := admin.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Empty(t, left)
}

// Two Concurrency limiters with different Names, and a rate Limiter with
// the same Name as one of them, on one Redis and one key: none sees the
// others' state.
func TestConcurrencyRedisNamesKeepApart(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	a := concurrencyReplicas(t, srv, 1, ConcurrencyConfig{Max: 1, Name: "a"})[0]
	b := concurrencyReplicas(t, srv, 1, ConcurrencyConfig{Max: 1, Name: "b"})[0]
	rate, err := New(Config{Limits: []Limit{PerMinute(1)}, Name: "a", Redis: srv.Client(t), StorageTimeout: slowMachine})
	require.NoError(t, err)
	for _, key := range []string{"k", "slots{k}", ":slots{k}"} {
		sa := requireSlot(t, a, key, true, 0)
		sb := requireSlot(t, b, key, true, 0)
		res, err := rate.Take(ctx, key, 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed(), "rate limiter of key %q", key)
		res, err = rate.Take(ctx, key, 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed(), "rate limiter of key %q", key)
		require.NoError(t, a.Release(ctx, &sa))
		require.NoError(t, b.Release(ctx, &sb))
		requireSlot(t, a, key, true, 0) // left held: the rate limiter's next take must not see it
	}
	keys, err := admin.Keys(ctx, "limiter:a:slots{*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 3, "a's held slots, one set per key: %q", keys)
	keys, err = admin.Keys(ctx, "limiter:b:slots{*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "b released all its slots")
}

// A sorted set under a key's name that another program wrote, with a
// member scored +inf (a slot that never expires) and no TTL, takes one of
// the key's slots only until Expiration: a key kept busy must not run
// with one slot fewer for good.
func TestConcurrencyRedisForeignEndlessMemberFreedWhileKeyBusy(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cfg := ConcurrencyConfig{Max: 2, Expiration: 100 * time.Millisecond, Name: "busy"}
	c := concurrencyReplicas(t, srv, 1, cfg)[0]
	key := slotsKey(cfg, "k")
	require.NoError(t, admin.ZAdd(ctx, key, goredis.Z{Score: math.Inf(1), Member: "intruder"}).Err())
	// One request at a time, for 10 Expirations: the key never goes idle.
	end := time.Now().Add(10 * cfg.Expiration)
	for time.Now().Before(end) {
		s, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, s.Allowed())
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, c.Release(ctx, &s))
	}
	a := requireSlot(t, c, "k", true, 1) // "intruder" no longer holds a slot
	s := requireSlot(t, c, "k", true, 0)
	require.NoError(t, c.Release(ctx, &a))
	require.NoError(t, c.Release(ctx, &s))
}

// A full sorted set of another program's with slots that never expire
// (+inf, which no Concurrency writes) and a TTL of an hour holds the key
// off no longer than about Expiration, as a value of another type does
// (slots.lua shortens its TTL to the slots' expiry).
func TestConcurrencyRedisForeignFullSetHeldNoLongerThanExpiration(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cfg := ConcurrencyConfig{Max: 1, Expiration: 100 * time.Millisecond, Name: "full"}
	c := concurrencyReplicas(t, srv, 1, cfg)[0]
	key := slotsKey(cfg, "k")
	require.NoError(t, admin.ZAdd(ctx, key, goredis.Z{Score: math.Inf(1), Member: "intruder"}).Err())
	require.NoError(t, admin.Expire(ctx, key, time.Hour).Err())
	require.Eventually(t, func() bool {
		s, err := c.Acquire(ctx, "k")
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, &s))
		return s.Allowed()
	}, 10*cfg.Expiration, 10*time.Millisecond, "k free within 10 Expirations")
}

// Waiters of one replica get the slots that another replica releases (by
// polling) and that their own replica releases (at once); a waiter whose
// context ends gives up holding nothing, and the key's set is empty after.
func TestConcurrencyRedisWaitersAcrossReplicasLeaveNothing(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cfg := ConcurrencyConfig{Max: 1, Name: "wait", MaxWaiting: 2}
	cs := concurrencyReplicas(t, srv, 2, cfg)
	held := requireSlot(t, cs[0], "k", true, 0)
	got := make(chan Slot, 3)
	for range 2 {
		go func() {
			s, err := cs[1].AcquireWait(ctx, "k", 5*time.Second)
			assert.NoError(t, err)
			got <- s
		}()
	}
	require.Eventually(t, func() bool { return cs[1].waiters.waiting.Load() == 2 }, 5*time.Second, time.Millisecond)
	over, err := cs[1].AcquireWait(ctx, "k", 5*time.Second) // beyond MaxWaiting
	require.NoError(t, err)
	assert.False(t, over.Allowed())
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = cs[0].AcquireWait(gone, "k", 5*time.Second)
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, cs[0].Release(ctx, &held)) // another replica's release
	first := <-got
	require.True(t, first.Allowed())
	start := time.Now()
	require.NoError(t, cs[1].Release(ctx, &first)) // a local release
	second := <-got
	require.True(t, second.Allowed())
	t.Logf("local release to waiter: %v", time.Since(start))
	require.NoError(t, cs[1].Release(ctx, &second))
	n, err := admin.ZCard(ctx, slotsKey(cfg, "k")).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// An Acquire whose script call outlives StorageTimeout (Redis busy) is
// answered by FailurePolicy, but Redis still runs the script later and
// takes a slot that no Release will free: the slot should be given back
// once Redis answers this replica again, not held until Expiration (a minute here), or
// a few slow moments lock a key out.
func TestConcurrencyRedisTimedOutAcquireLeavesNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cfg := ConcurrencyConfig{Max: 1, Expiration: time.Minute, Name: "late", StorageTimeout: 50 * time.Millisecond,
		OnStorageError: func(error) {}}
	cfg.Redis = srv.Client(t)
	c := newMemoryConcurrency(t, cfg)
	warm := requireSlot(t, c, "k", true, 0) // the script is loaded: the late call runs
	require.NoError(t, c.Release(ctx, &warm))
	busy := busyRedis(t, srv, time.Second)
	s, err := c.Acquire(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, SourceFallback, s.Source(), "answered while Redis was busy")
	require.NoError(t, c.Release(ctx, &s))
	require.NoError(t, <-busy)
	// Redis answers again (this replica has called it; on a loaded
	// machine maybe only after a few more tries), and this replica holds
	// no slot of k.
	require.Eventually(t, func() bool {
		other, err := c.Acquire(ctx, "other")
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Release(ctx, &other)) }()
		return other.Source() == SourceBackend
	}, 10*time.Second, 20*time.Millisecond)
	settled(t, c, admin, slotsKey(cfg, "k"), "slots of a timed-out Acquire left in Redis")
	s, err = c.Acquire(ctx, "k")
	require.NoError(t, err)
	assert.True(t, s.Allowed(), "k with no request in flight, answered by %v", s.Source())
	require.NoError(t, c.Release(ctx, &s))
}

// Redis killed and restarted while replicas hammer one key, under each
// FailurePolicy but FailError: no Acquire errs, and once all requests have
// ended no slot is left, in Redis or in FailFallback's memory.
func TestConcurrencyRedisKilledMidRunLeavesNothing(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []FailurePolicy{FailFallback, FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := ConcurrencyConfig{Max: 2, Name: "killed", FailurePolicy: policy, StorageTimeout: 50 * time.Millisecond,
				BreakerCooldown: 20 * time.Millisecond, OnStorageError: func(error) {}}
			cs := concurrencyReplicas(t, srv, 2, cfg)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var fallback atomic.Int64
			for i := range 8 {
				wg.Go(func() {
					c := cs[i%len(cs)]
					for {
						select {
						case <-stop:
							return
						default:
						}
						s, err := c.Acquire(ctx, "k")
						if !assert.NoError(t, err) {
							return
						}
						if s.Source() != SourceBackend {
							fallback.Add(1)
						}
						time.Sleep(time.Duration(rand.N(2000)) * time.Microsecond)
						_ = c.Release(ctx, &s) // fails while Redis is down
					}
				})
			}
			time.Sleep(50 * time.Millisecond)
			srv.Stop()
			time.Sleep(100 * time.Millisecond)
			srv.Restart()
			// Served by Redis again, then stopped.
			require.Eventually(t, func() bool {
				s, err := cs[0].Acquire(ctx, "other")
				require.NoError(t, err)
				require.NoError(t, cs[0].Release(ctx, &s))
				return s.Source() == SourceBackend
			}, 10*time.Second, 10*time.Millisecond)
			time.Sleep(50 * time.Millisecond)
			close(stop)
			wg.Wait()
			assert.Positive(t, fallback.Load(), "answers by the policy while Redis was down")
			for _, c := range cs {
				if c.local != nil {
					assert.Zero(t, c.local.keyCount(), "keys in FailFallback's memory")
				}
			}
			n, err := srv.Client(t).ZCard(ctx, slotsKey(cfg, "k")).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "slots left in Redis")
		})
	}
}

// busyRedis keeps srv busy for d, running a script that spins on Redis's
// clock, and returns once srv has left a PING unanswered for 20 ms; the
// channel gets the script's error when it ends.
func busyRedis(t *testing.T, srv *redistest.Server, d time.Duration) <-chan error {
	t.Helper()
	ctx := context.Background()
	admin, probe := srv.Client(t), srv.Client(t)
	busy := make(chan error, 1)
	go func() {
		busy <- admin.Eval(ctx, `local t = redis.call('TIME'); local s = t[1]*1000000 + t[2]
			while true do t = redis.call('TIME'); if t[1]*1000000 + t[2] - s > tonumber(ARGV[1]) then return 1 end end`,
			nil, d.Microseconds()).Err()
	}()
	require.Eventually(t, func() bool {
		pong := make(chan struct{}, 1)
		go func() {
			_ = probe.Ping(ctx).Err() // answered at all: not busy yet
			pong <- struct{}{}
		}()
		select {
		case <-pong:
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	}, 5*time.Second, time.Millisecond, "Redis never got busy")
	return busy
}

// A slot taken on Redis whose request ends while the breaker is open
// (a short outage of Redis, over by then) is given back once Redis is
// called again, not held until Expiration: a blip shorter than a second
// must not lock the keys whose requests ended in it out for a minute.
func TestConcurrencyRedisReleaseDuringOpenBreakerGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	cfg := ConcurrencyConfig{Max: 1, Expiration: time.Minute, Name: "blip", StorageTimeout: 50 * time.Millisecond,
		BreakerFailures: 1, BreakerCooldown: 2 * time.Second, OnStorageError: func(error) {}}
	c := concurrencyReplicas(t, srv, 1, cfg)[0]
	held := requireSlot(t, c, "k", true, 0)
	busy := busyRedis(t, srv, 300*time.Millisecond)
	s, err := c.Acquire(ctx, "other") // times out: the breaker opens
	require.NoError(t, err)
	require.Equal(t, SourceFallback, s.Source())
	require.NoError(t, c.Release(ctx, &s))
	require.NoError(t, <-busy)
	require.Error(t, c.Release(ctx, &held), "released while the breaker is open")
	require.Eventually(t, func() bool { // the breaker closes: Redis answers
		s, err := c.Acquire(ctx, "other")
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, &s))
		return s.Source() == SourceBackend
	}, 5*time.Second, 10*time.Millisecond)
	// Each call Redis answers settles an owed slot (one that times out on
	// a loaded machine stays owed for the next).
	settled(t, c, admin, slotsKey(cfg, "k"), "k's slot, released during the outage, left in Redis")
	s, err = c.Acquire(ctx, "k")
	require.NoError(t, err)
	assert.True(t, s.Allowed(), "k with no request in flight, answered by %v", s.Source())
	require.NoError(t, c.Release(ctx, &s))
}

// A Slot released through another Concurrency (two limiters of one
// process, a key in common) frees no slot of that other one: each
// Concurrency's slots are freed by their own Slots alone.
func TestConcurrencyMemoryReleaseOfAnotherLimitersSlotFreesNothing(t *testing.T) {
	ctx := context.Background()
	first := newMemoryConcurrency(t, ConcurrencyConfig{Max: 1})
	second := newMemoryConcurrency(t, ConcurrencyConfig{Max: 1})
	requireSlot(t, first, "k", true, 0) // in flight, not released
	other := requireSlot(t, second, "k", true, 0)
	_ = first.Release(ctx, &other)       // a mistake: other is second's
	requireSlot(t, first, "k", false, 0) // other's id frees none of first's slots
}

// settled asserts that the owed slots of c come out of the set stored
// (a key of c's), as c makes calls that Redis answers: each settles one,
// and one that times out on a loaded machine stays owed for the next.
func settled(t *testing.T, c *Concurrency, admin *goredis.Client, stored, msg string) {
	t.Helper()
	ctx := context.Background()
	assert.Eventually(t, func() bool {
		s, err := c.Acquire(ctx, "other")
		require.NoError(t, err)
		require.NoError(t, c.Release(ctx, &s))
		n, err := admin.ZCard(ctx, stored).Result()
		require.NoError(t, err)
		return n == 0
	}, 10*time.Second, 10*time.Millisecond, msg)
}
