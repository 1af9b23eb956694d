package quota

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newMemoryConcurrency returns an in-memory Concurrency of cfg.
func newMemoryConcurrency(t testing.TB, cfg ConcurrencyConfig) *Concurrency {
	t.Helper()
	c, err := NewConcurrency(cfg)
	require.NoError(t, err)
	return c
}

// manualClock is a memory Concurrency's clock, moved by the test.
type manualClock struct{ ns atomic.Int64 }

func (m *manualClock) now() int64              { return m.ns.Load() }
func (m *manualClock) add(d time.Duration)     { m.ns.Add(int64(d)) }
func withClock(c *Concurrency, m *manualClock) { c.local.now = m.now }

// requireSlot acquires a slot of key and requires the answer.
func requireSlot(t *testing.T, c *Concurrency, key string, allowed bool, remaining int) Slot {
	t.Helper()
	s, err := c.Acquire(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, allowed, s.Allowed(), "admitted")
	require.Equal(t, remaining, s.Remaining(), "Remaining")
	require.Equal(t, c.max, s.Limit(), "Limit")
	if allowed {
		require.Zero(t, s.RetryAfter())
	} else {
		require.Equal(t, time.Second, s.RetryAfter())
	}
	return s
}

// heldAtOnce runs callers that acquire a slot of one key at once through
// the Concurrency acquire(i) returns, each admitted one holding its slot
// until every caller has had its answer and then for hold, and returns how
// many were admitted and the most in flight at once.
func heldAtOnce(t *testing.T, callers int, hold time.Duration, acquire func(i int) *Concurrency) (admitted, most int64) {
	t.Helper()
	var inFlight, peak, ok atomic.Int64
	var decided, done sync.WaitGroup
	start := make(chan struct{})
	decided.Add(callers)
	for i := range callers {
		done.Add(1)
		go func() {
			defer done.Done()
			c := acquire(i)
			<-start
			s, err := c.Acquire(context.Background(), "k")
			decided.Done()
			if !assert.NoError(t, err) || !s.Allowed() {
				return
			}
			ok.Add(1)
			n := inFlight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			decided.Wait() // all answered while this one holds its slot
			time.Sleep(hold)
			inFlight.Add(-1)
			assert.NoError(t, c.Release(context.Background(), &s))
		}()
	}
	close(start)
	done.Wait()
	return ok.Load(), peak.Load()
}

// Max 3, 10 callers at once holding for 400 ms: exactly 3 admitted, never
// more than 3 in flight, and every slot free again afterwards.
func TestConcurrencyMemoryAdmitsMax(t *testing.T) {
	c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 3})
	admitted, most := heldAtOnce(t, 10, 400*time.Millisecond, func(int) *Concurrency { return c })
	assert.Equal(t, int64(3), admitted)
	assert.LessOrEqual(t, most, int64(3))
	assert.Zero(t, c.local.keyCount(), "a key with no slot held is forgotten")
	requireSlot(t, c, "k", true, 2)
}

// Release gives back its own slot once: a second Release of the slot (or
// of a copy of it), or a Release of a rejected one, frees nothing.
func TestConcurrencyMemoryRelease(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		release func(c *Concurrency, held []Slot, rejected Slot)
	}{
		{"twice", func(c *Concurrency, held []Slot, _ Slot) {
			require.NoError(t, c.Release(ctx, &held[0]))
			require.NoError(t, c.Release(ctx, &held[0]))
		}},
		{"a copy after the slot", func(c *Concurrency, held []Slot, _ Slot) {
			cp := held[0]
			require.NoError(t, c.Release(ctx, &held[0]))
			require.NoError(t, c.Release(ctx, &cp))
		}},
		{"a rejected one", func(c *Concurrency, held []Slot, rejected Slot) {
			require.NoError(t, c.Release(ctx, &held[0]))
			require.NoError(t, c.Release(ctx, &rejected))
			require.NoError(t, c.Release(ctx, nil))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 3})
			held := []Slot{requireSlot(t, c, "k", true, 2), requireSlot(t, c, "k", true, 1), requireSlot(t, c, "k", true, 0)}
			rejected := requireSlot(t, c, "k", false, 0)
			tc.release(c, held, rejected)
			requireSlot(t, c, "k", true, 0) // the one slot freed
			requireSlot(t, c, "k", false, 0)
		})
	}
}

// A slot never released comes back after Expiration, not before, and the
// late Release of an expired slot frees no other request's.
func TestConcurrencyMemoryExpiredSlotsComeBack(t *testing.T) {
	c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 2, Expiration: time.Second})
	var clock manualClock
	withClock(c, &clock)
	lost := requireSlot(t, c, "k", true, 1)
	clock.add(500 * time.Millisecond)
	requireSlot(t, c, "k", true, 0)
	clock.add(499 * time.Millisecond)
	requireSlot(t, c, "k", false, 0)
	clock.add(time.Millisecond) // the first slot's Expiration
	requireSlot(t, c, "k", true, 0)
	require.NoError(t, c.Release(context.Background(), &lost))
	requireSlot(t, c, "k", false, 0)
}

// MaxKeys bounds the keys with slots: a new key is rejected while every
// key holds a live slot, and gets in once one is released or expires.
func TestConcurrencyMemoryMaxKeys(t *testing.T) {
	c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 1, MaxKeys: 2, Expiration: time.Second})
	var clock manualClock
	withClock(c, &clock)
	a := requireSlot(t, c, "a", true, 0)
	requireSlot(t, c, "b", true, 0)
	requireSlot(t, c, "c", false, 0)
	require.NoError(t, c.Release(context.Background(), &a))
	requireSlot(t, c, "c", true, 0)
	requireSlot(t, c, "d", false, 0)
	clock.add(time.Second) // b's and c's slots expire
	requireSlot(t, c, "d", true, 0)
	assert.LessOrEqual(t, c.local.keyCount(), 2)
}

// Keys are any bytes, of any length, each with slots of its own, and are
// copied: a key whose bytes the caller reuses stays the key it was.
func TestConcurrencyMemoryHostileKeys(t *testing.T) {
	c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 1})
	keys := []string{"", strings.Repeat("x", 1<<20), "\x00\xff{}:\n", "k"}
	held := make([]Slot, len(keys))
	for i, k := range keys {
		held[i] = requireSlot(t, c, k, true, 0)
	}
	for _, k := range keys {
		requireSlot(t, c, k, false, 0)
	}
	buf := []byte("reused")
	s := requireSlot(t, c, unsafe.String(&buf[0], len(buf)), true, 0)
	copy(buf, "shared")
	requireSlot(t, c, "reused", false, 0)
	requireSlot(t, c, "shared", true, 0)
	require.NoError(t, c.Release(context.Background(), &s))
	requireSlot(t, c, "reused", true, 0)
	for i := range held {
		require.NoError(t, c.Release(context.Background(), &held[i]))
	}
}

// NewConcurrency names the field at fault.
func TestConcurrencyConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   ConcurrencyConfig
		field string
	}{
		{ConcurrencyConfig{}, "Max"},
		{ConcurrencyConfig{Max: -1}, "Max"},
		{ConcurrencyConfig{Max: 1, Expiration: -time.Second}, "Expiration"},
		{ConcurrencyConfig{Max: 1, Expiration: time.Microsecond}, "Expiration"},
		{ConcurrencyConfig{Max: 1, StorageTimeout: time.Microsecond}, "StorageTimeout"},
		{ConcurrencyConfig{Max: 1, MaxKeys: -1}, "MaxKeys"},
		{ConcurrencyConfig{Max: 1, MaxWaiting: -1}, "MaxWaiting"},
		{ConcurrencyConfig{Max: 1, FailurePolicy: FailError + 1}, "FailurePolicy"},
		{ConcurrencyConfig{Max: 1, Name: "a{b}"}, "Name"},
		{ConcurrencyConfig{Max: 1, Redis: (*goredis.Client)(nil)}, "Redis"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := NewConcurrency(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "limiter: "+tc.field+" ")
		})
	}
}

// AcquireWait in memory: a local Release hands the slot to a waiter,
// MaxWaiting bounds the waiters, and a canceled waiter holds nothing.
func TestConcurrencyMemoryAcquireWait(t *testing.T) {
	ctx := context.Background()
	c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 1, MaxWaiting: 2})
	held := requireSlot(t, c, "k", true, 0)
	got := make(chan Slot, 2)
	for range 2 {
		go func() {
			s, err := c.AcquireWait(ctx, "k", time.Minute)
			assert.NoError(t, err)
			got <- s
		}()
	}
	require.Eventually(t, func() bool { return c.waiters.waiting.Load() == 2 }, 10*time.Second, time.Millisecond)
	// Beyond MaxWaiting: rejected at once, not at its maxDelay (nor at
	// the context's deadline, which would be an error).
	short, cancelShort := context.WithTimeout(ctx, 10*time.Second)
	defer cancelShort()
	third, err := c.AcquireWait(short, "k", time.Minute)
	require.NoError(t, err)
	assert.False(t, third.Allowed())
	require.NoError(t, c.Release(ctx, &held))
	first := <-got
	assert.True(t, first.Allowed())
	require.NoError(t, c.Release(ctx, &first))
	second := <-got
	assert.True(t, second.Allowed())

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	s, err := c.AcquireWait(cctx, "k", time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, s.Allowed())
	require.NoError(t, c.Release(ctx, &second))
	assert.Zero(t, c.local.keyCount(), "the canceled waiter holds nothing")
	assert.Zero(t, c.waiters.watched.Load())
	_, err = c.AcquireWait(cctx, "k", time.Minute)
	require.ErrorIs(t, err, context.Canceled, "a context ended before the call")
}

// Acquire and Release of a key in memory, one caller: no allocation.
func TestConcurrencyMemoryAllocs(t *testing.T) {
	c := newMemoryConcurrency(t, ConcurrencyConfig{Max: 3})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		s, _ := c.Acquire(ctx, "k")
		_ = c.Release(ctx, &s)
	})
	assert.Zero(t, allocs)
}

func BenchmarkConcurrencyMemory(b *testing.B) {
	c, err := NewConcurrency(ConcurrencyConfig{Max: 3})
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, _ := c.Acquire(ctx, "client-1")
		_ = c.Release(ctx, &s)
	}
}
