package quota

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frozenClock is a Config.Now that stands still until moved: every take
// of a burst "at once" is decided at the same instant, on every replica.
type frozenClock struct{ ms atomic.Int64 }

func newFrozenClock() *frozenClock {
	c := &frozenClock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *frozenClock) Now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *frozenClock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// turnReplicas returns n Limiters of cfg: in memory one (n is then 1), on
// Redis n, each with a client of its own.
func turnReplicas(t *testing.T, server *redistest.Server, n int, cfg Config) []*Limiter {
	t.Helper()
	if server == nil {
		n = 1
	}
	var ls []*Limiter
	for range n {
		c := cfg
		if server != nil {
			c.Redis, c.StorageTimeout, c.Name = server.Client(t), slowMachine, "turns"
		}
		l, err := New(c)
		require.NoError(t, err)
		ls = append(ls, l)
	}
	return ls
}

// A burst of takes that may wait gets, from every algorithm, exactly the
// turns the algorithm has within MaxDelay, on one process and across
// three replicas of one Redis: the token bucket one a refill (10 a
// second, Burst 1: 1 now and 19 at 100 ms steps within 1.95 s, 5
// rejected at once), the fixed window its next window (5 a second within
// 1.5 s: 5 now, 5 at the next window, 2 rejected), the sliding window
// the times its estimate falls below the limit (5 now, then at 200 and
// 400 ms into the next window), the log the times its entries leave.
func TestReserveGivesTheTurnsWithinMaxDelay(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name     string
		alg      Algorithm
		limit    Limit
		delay    time.Duration
		requests int
		waits    []time.Duration // of the admitted, sorted
	}{
		{"token bucket", TokenBucket, Limit{Max: 10, Expiration: time.Second, Burst: 1}, 1950 * time.Millisecond, 25,
			[]time.Duration{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800, 1900}},
		{"fixed window", FixedWindow, PerSecond(5), 1500 * time.Millisecond, 12,
			[]time.Duration{0, 0, 0, 0, 0, 1000, 1000, 1000, 1000, 1000}},
		{"sliding window", SlidingWindow, PerSecond(5), 1500 * time.Millisecond, 12,
			[]time.Duration{0, 0, 0, 0, 0, 1200, 1400}},
		{"sliding log", SlidingLog, PerSecond(5), 1500 * time.Millisecond, 12,
			[]time.Duration{0, 0, 0, 0, 0, 1000, 1000, 1000, 1000, 1000}},
	}
	for _, c := range cases {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(c.name+"/"+where.name, func(t *testing.T) {
				clock := newFrozenClock()
				ls := turnReplicas(t, where.server, 3, Config{Algorithm: c.alg, Limits: []Limit{c.limit}, Now: clock.Now})
				var mu sync.Mutex
				var waits []time.Duration
				rejected := 0
				var wg sync.WaitGroup
				for i := range c.requests {
					wg.Go(func() {
						r, err := ls[i%len(ls)].Reserve(context.Background(), "k", 1, c.delay)
						require.NoError(t, err)
						mu.Lock()
						defer mu.Unlock()
						if !r.Allowed() {
							rejected++
							assert.Positive(t, r.RetryAfter(), "a rejection says when")
							return
						}
						waits = append(waits, r.Delay())
					})
				}
				wg.Wait()
				slices.Sort(waits)
				want := make([]time.Duration, len(c.waits))
				for i, w := range c.waits {
					want[i] = w * time.Millisecond
				}
				assert.Equal(t, want, waits)
				assert.Equal(t, c.requests-len(c.waits), rejected)
			})
		}
	}
}

// Waiters wake no sooner than their turns, measured from before the
// first take, with Redis's own clock: three replicas, a token bucket of
// 10 a second and Burst 1, 25 takes at once that may wait 1.95 s; the
// k-th admitted runs no sooner than k x 100 ms, and the bucket's bound
// holds at every run: no more than 1 + k ran within k x 100 ms.
func TestWaitersRunNoSoonerThanTheirTurns(t *testing.T) {
	server := redistest.Start(t)
	ls := turnReplicas(t, server, 3, Config{Algorithm: TokenBucket, Limits: []Limit{{Max: 10, Expiration: time.Second, Burst: 1}}})
	start := time.Now()
	var mu sync.Mutex
	var ran []time.Duration
	var rejected atomic.Int64
	var wg sync.WaitGroup
	for i := range 25 {
		wg.Go(func() {
			res, err := ls[i%3].Wait(context.Background(), "k", 1, 1950*time.Millisecond)
			require.NoError(t, err)
			if !res.Allowed() {
				rejected.Add(1)
				return
			}
			mu.Lock()
			ran = append(ran, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(ran)
	// The takes reach Redis over some ms: a later one's 1.95 s reaches a
	// turn or two further. At least 20 run, and each no sooner than its
	// place in the bucket's order allows.
	assert.GreaterOrEqual(t, len(ran), 20)
	assert.Equal(t, int64(25-len(ran)), rejected.Load())
	for k, at := range ran {
		assert.GreaterOrEqual(t, at, time.Duration(k)*100*time.Millisecond, "the %d-th run", k)
	}
}

// A waiter that gives its turn back (its request ended) hands it to the
// next take when no later turn counts on it: the fixed window's turn in
// the key's latest window, and the token bucket's last turn, go to the
// next take. A turn with later turns after it gives back nothing (as
// golang.org/x/time/rate's Cancel): a window's state holds the latest
// window alone, and a bucket's later turns count on its tokens (else two
// would run at the last turn, beyond Burst).
func TestACanceledTurnGoesToTheNextTake(t *testing.T) {
	server := redistest.Start(t)
	for _, where := range []struct {
		name   string
		server *redistest.Server
	}{{"memory", nil}, {"redis", server}} {
		t.Run(where.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newFrozenClock()
			fixed := turnReplicas(t, where.server, 2, Config{Limits: []Limit{PerSecond(2)}, Now: clock.Now})
			reserve := func(i int, key string) *Reservation {
				t.Helper()
				r, err := fixed[i%len(fixed)].Reserve(ctx, key, 1, 2500*time.Millisecond)
				require.NoError(t, err)
				return r
			}
			var got []time.Duration
			var turns []*Reservation
			for i := range 4 {
				r := reserve(i, "fixed")
				turns = append(turns, r)
				got = append(got, r.Delay())
			}
			require.Equal(t, []time.Duration{0, 0, time.Second, time.Second}, got)
			// The waiter whose request ends gives its turn back.
			waitCtx, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, turns[2].Wait(waitCtx), context.Canceled)
			assert.False(t, turns[2].Allowed())
			c := reserve(1, "fixed")
			assert.True(t, c.Allowed())
			assert.Equal(t, time.Second, c.Delay(), "the canceled turn is the next take's")
			d := reserve(0, "fixed")
			assert.Equal(t, 2*time.Second, d.Delay())
			turns[3].Cancel(ctx) // its window is no longer the key's latest: nothing comes back
			e := reserve(1, "fixed")
			assert.Equal(t, 2*time.Second, e.Delay())
			f := reserve(0, "fixed")
			assert.False(t, f.Allowed(), "every turn within 2.5 s is taken")

			bucket := turnReplicas(t, where.server, 2, Config{Algorithm: TokenBucket, Limits: []Limit{{Max: 10, Expiration: time.Second, Burst: 1}}, Now: clock.Now})
			turns = nil
			for i := range 4 {
				r, err := bucket[i%len(bucket)].Reserve(ctx, "bucket", 1, time.Second)
				require.NoError(t, err)
				require.Equal(t, time.Duration(i)*100*time.Millisecond, r.Delay())
				turns = append(turns, r)
			}
			turns[3].Cancel(ctx) // the last: the next take has its turn
			next, err := bucket[0].Reserve(ctx, "bucket", 1, time.Second)
			require.NoError(t, err)
			assert.Equal(t, 300*time.Millisecond, next.Delay())
			turns[1].Cancel(ctx) // one with a turn after it: nothing comes back
			after, err := bucket[len(bucket)-1].Reserve(ctx, "bucket", 1, time.Second)
			require.NoError(t, err)
			assert.Equal(t, 400*time.Millisecond, after.Delay(), "no take beside the turn at 300 ms")
			for _, r := range append(turns, next, after) {
				r.Cancel(ctx)
			}
		})
	}
}

// MaxWaiting bounds the takes that wait at once: beyond it, a take is
// decided as one that may not wait (rejected when it would have waited),
// and a place comes back when a waiter's turn comes or it gives it back.
func TestMaxWaitingBoundsTheWaiters(t *testing.T) {
	ctx := context.Background()
	clock := newFrozenClock()
	l, err := New(Config{Limits: []Limit{PerSecond(1)}, MaxWaiting: 2, Now: clock.Now})
	require.NoError(t, err)
	now, err := l.Reserve(ctx, "k", 1, 10*time.Second)
	require.NoError(t, err)
	require.True(t, now.Allowed())
	var held []*Reservation
	for range 2 {
		r, err := l.Reserve(ctx, "k", 1, 10*time.Second)
		require.NoError(t, err)
		require.True(t, r.Allowed())
		require.Positive(t, r.Delay())
		held = append(held, r)
	}
	over, err := l.Reserve(ctx, "k", 1, 10*time.Second)
	require.NoError(t, err)
	assert.False(t, over.Allowed(), "a third waiter is one too many")
	held[0].Cancel(ctx)
	again, err := l.Reserve(ctx, "k", 1, 10*time.Second)
	require.NoError(t, err)
	assert.True(t, again.Allowed(), "a place given back is free again")
	assert.Equal(t, int64(2), l.waiting.Load())
	held[1].Cancel(ctx)
	again.Cancel(ctx)
	assert.Zero(t, l.waiting.Load())
}

// Reserve refuses what it cannot keep exact, naming it: a negative cost
// or delay, a delay longer than a state may lie ahead, BlockFor,
// MinInterval, Lease.
func TestReserveRefusesWhatItCannotKeep(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		cfg   Config
		cost  int
		delay time.Duration
		want  string
	}{
		{"negative cost", Config{}, -1, time.Second, "cost"},
		{"negative delay", Config{}, 1, -time.Second, "maxDelay"},
		{"beyond a minute", Config{Limits: []Limit{PerSecond(5)}}, 1, 61 * time.Second, "maxDelay"},
		{"block", Config{BlockFor: time.Minute}, 1, time.Second, "BlockFor"},
		{"gap", Config{MinInterval: time.Second}, 1, time.Second, "MinInterval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			if cfg.Limits == nil {
				cfg.Limits = []Limit{PerSecond(5)}
			}
			l, err := New(cfg)
			require.NoError(t, err)
			_, err = l.Reserve(ctx, "k", c.cost, c.delay)
			require.ErrorContains(t, err, c.want)
		})
	}
	long, err := New(Config{Limits: []Limit{PerHour(5)}})
	require.NoError(t, err)
	_, err = long.Reserve(ctx, "k", 1, 30*time.Minute)
	assert.NoError(t, err, "an hour's window may hold a turn half an hour ahead")
}

// A turn given back that leaves nothing counted ahead still holds the
// key's clock at the turn: the next take gets that turn, not the time
// the key's earlier takes already spent (the window, the bucket and the
// log those takes filled). Without it, the next take would be admitted at
// once, beside them: one over the limit. The log keeps its clock in its
// newest entry, so it does not give back a turn that is its newest: the
// next take comes a turn later.
func TestAGivenBackTurnKeepsTheKeysClock(t *testing.T) {
	server := redistest.Start(t)
	cases := []struct {
		name  string
		alg   Algorithm
		limit Limit
		turn  time.Duration
		next  time.Duration
	}{
		{"fixed window", FixedWindow, PerSecond(1), time.Second, time.Second},
		{"sliding window", SlidingWindow, PerSecond(1), 2 * time.Second, 2 * time.Second},
		{"token bucket", TokenBucket, Limit{Max: 10, Expiration: time.Second, Burst: 1}, 100 * time.Millisecond, 100 * time.Millisecond},
		{"sliding log", SlidingLog, PerSecond(1), time.Second, 2 * time.Second},
	}
	for _, c := range cases {
		for _, where := range []struct {
			name   string
			server *redistest.Server
		}{{"memory", nil}, {"redis", server}} {
			t.Run(c.name+"/"+where.name, func(t *testing.T) {
				ctx := context.Background()
				clock := newFrozenClock()
				l := turnReplicas(t, where.server, 1, Config{Algorithm: c.alg, Limits: []Limit{c.limit}, Now: clock.Now})[0]
				first, err := l.Reserve(ctx, "k", 1, 5*time.Second)
				require.NoError(t, err)
				require.Zero(t, first.Delay())
				waiter, err := l.Reserve(ctx, "k", 1, 5*time.Second)
				require.NoError(t, err)
				require.Equal(t, c.turn, waiter.Delay())
				waiter.Cancel(ctx)
				next, err := l.Reserve(ctx, "k", 1, 5*time.Second)
				require.NoError(t, err)
				assert.True(t, next.Allowed())
				assert.Equal(t, c.next, next.Delay(), "the next take has the turn given back, no sooner")
				next.Cancel(ctx)
			})
		}
	}
}
