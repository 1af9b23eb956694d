package quota

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests put leases through what a client, an application or Redis
// may do to them beside plain takes: adjustments (Reward, Penalize),
// refunds on replicas of another Lease, replicas whose clocks differ, and
// Redis stalling while grants are under way. Each compares with what the
// exact path (a script call per take) allows.

// shareLeft is how many units l's share of key holds unused, 0 when none
// is out.
func shareLeft(t *testing.T, l *Limiter, key string) int64 {
	t.Helper()
	s := l.decider.(*leasedStore)
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil || e.share == nil || e.share.id == 0 {
		return 0
	}
	return e.share.taken - e.share.used
}

// takeUntilRejected takes 1 for key from l until a take is rejected, at
// most limit+1 times, and returns how many were admitted.
func takeUntilRejected(t *testing.T, l *Limiter, key string, limit int) int {
	t.Helper()
	n := 0
	for range limit + 1 {
		res, err := l.Take(context.Background(), key, 1)
		require.NoError(t, err)
		if !res.Allowed() {
			return n
		}
		n++
	}
	return n
}

// Adjustments made while a share is out, on a limit of a whole hour (no
// window ends, and a bucket refills a unit in 36 s). The units a replica
// holds unused in its share are counted in the store but not spent: a
// Reward would give them back while the share still spends them, so a
// limiter with leases refuses it (errLeasedReward) and nothing changes. A
// Penalize of the whole limit ends the share of the replica that makes
// it; another replica's share decides until its lease ends: after the
// penalty the replicas admit nothing more than it holds, and never more
// than the limit in all.
func TestLeaseAdjustmentsWhileAShareIsOut(t *testing.T) {
	lim := PerHour(100)
	for _, adj := range []string{"reward", "penalize-elsewhere", "penalize-here"} {
		for _, alg := range leaseAlgorithms {
			t.Run(adj+"/"+alg.String(), func(t *testing.T) {
				srv := redistest.Start(t)
				ls := leaseReplicas(t, srv, 2, Config{Algorithm: alg, Limits: []Limit{lim}, Lease: 1500 * time.Millisecond, StorageTimeout: slowMachine})
				a, b, ctx := ls[0], ls[1], context.Background()
				spent := takeUntilLeased(t, a, "k")
				for spent < 60 && shareLeft(t, a, "k") < 10 {
					requireAllowed(t, a, "k") // its shares grow with its use
					spent++
				}
				held := int(shareLeft(t, a, "k"))
				require.Positive(t, held, "a holds units of its share unused")
				var most int
				switch adj {
				case "reward":
					_, err := b.Reward(ctx, "k", lim.Max)
					require.ErrorIs(t, err, errLeasedReward)
					most = lim.Max - spent // the rest, as before
				case "penalize-elsewhere":
					_, err := b.Penalize(ctx, "k", lim.Max)
					require.NoError(t, err)
					most = held // a's share, until its lease ends
				case "penalize-here":
					_, err := a.Penalize(ctx, "k", lim.Max)
					require.NoError(t, err)
					most = 0
				}
				after := takeUntilRejected(t, b, "k", 2*lim.Max) + takeUntilRejected(t, a, "k", 2*lim.Max)
				t.Logf("%s: %d spent, %d held in a's share; after the %s the replicas admitted %d (at most %d)",
					alg, spent, held, adj, after, most)
				assert.LessOrEqual(t, after, most)
				assert.LessOrEqual(t, spent+after, lim.Max, "never more than the limit")
				leaseSettled(t, ls)
			})
		}
	}
}

// A token bucket's refund on a replica without Lease, in a rolling
// deploy that turns leases on (one Name, one Redis): a leased bucket
// takes no refund (errLeasedBucketRefund), since a share may be spent
// while the debt below it lasts and a credit lowers that debt. The
// replica without Lease credits it all the same: the debt under the
// other replica's share refills before the share is spent, and drained
// together they admit more than a full bucket, by at most the units
// refunded (docs/leases.md says so of such a deploy). A leased b is the
// control: its refund is refused, and the bound holds.
func TestLeaseBucketRefundOnAReplicaWithoutLease(t *testing.T) {
	lim := Limit{Max: 100, Expiration: time.Second, Burst: 200}
	for _, lease := range []time.Duration{time.Second, 0} {
		t.Run("b's Lease "+lease.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			a := leaseReplicas(t, srv, 1, Config{Algorithm: TokenBucket, Limits: []Limit{lim}, Lease: time.Second, StorageTimeout: slowMachine})[0]
			b := leaseReplicas(t, srv, 1, Config{Algorithm: TokenBucket, Limits: []Limit{lim}, Lease: lease, StorageTimeout: slowMachine})[0]
			ls := []*Limiter{a, b}
			g := newLeaseLog()
			ctx := context.Background()
			// b takes 80 in the store (TakeUpTo is never leased), to be
			// refunded; it is left out of the log, as if never taken.
			granted, upTo, err := b.TakeUpTo(ctx, "k", 80)
			require.NoError(t, err)
			require.Equal(t, 80, granted)
			// a's grants find b's 80 in the debt, and its shares may be
			// spent for as long as that debt has not refilled.
			for n := 0; n < 60 && shareLeft(t, a, "k") < 20; n++ {
				g.take(t, ls, 0, "k", 1)
			}
			held := shareLeft(t, a, "k")
			require.Positive(t, held)
			_, err = b.Refund(ctx, "k", granted, &upTo)
			t.Logf("b's refund: %v", err)
			time.Sleep(700 * time.Millisecond)
			for range 300 {
				g.take(t, ls, 1, "k", 1)
				g.take(t, ls, 0, "k", 1)
			}
			slack := 0.0
			if lease == 0 {
				slack = float64(granted) // the refund the deploy's old replica made
			} else {
				require.ErrorIs(t, err, errLeasedBucketRefund)
			}
			worst := checkBucketWithin(t, g.admitted(), lim, slack)
			t.Logf("b's Lease %v: a held %d; the most over the bucket's bound: %.2f", lease, held, worst)
			leaseSettled(t, ls)
		})
	}
}

// Replicas that keep time by Config.Now (the client's clock, which the
// store then uses for their calls) may be apart, as two machines' clocks
// are: a window that the replica ahead started would end, in the store,
// before the one behind saw it end, and a lease timed on the late clock
// would outlive it, its units spent in the next window. So a limiter on
// Redis refuses Lease with Now, and its leases are timed as Redis's TIME
// decides.
func TestLeaseRefusesClientClockOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	_, err := New(Config{Limits: []Limit{PerMinute(40)}, Lease: time.Second, Now: time.Now, Redis: srv.Client(t)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Lease is set with Now")
	// In memory a lease changes nothing, and Now is the clock as ever.
	_, err = New(Config{Limits: []Limit{PerMinute(40)}, Lease: time.Second, Now: time.Now})
	require.NoError(t, err)
}

// stall blocks srv for d (DEBUG SLEEP), from a goroutine of its own, and
// returns a wait for its end.
func stall(t *testing.T, srv *redistest.Server, d time.Duration) func() {
	t.Helper()
	admin := srv.Client(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		assert.NoError(t, admin.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds()).Err())
	}()
	time.Sleep(20 * time.Millisecond) // the sleep has begun
	return wg.Wait
}

// leaseAgain readies key on l for a new grant: hot from its last lease,
// with no share out (it ended and went back).
func leaseAgain(t *testing.T, l *Limiter, key string, lease time.Duration) {
	t.Helper()
	time.Sleep(lease + lease/10)
	leaseSettled(t, []*Limiter{l})
	require.Zero(t, shareLeft(t, l, key))
}

// Under FailError every take calls the store (the breaker never opens).
// A Redis that stops answering: each take waits for its own call, at
// most StorageTimeout, as without leases. Takes that find a grant under
// way for their key wait for it; when it fails, they must not each wait
// for a grant of their own in turn (the last of n callers would wait n
// timeouts, and callers arriving faster than one a timeout would pile up
// without bound).
func TestLeaseTakesWaitingOnAFailedGrant(t *testing.T) {
	const timeout = 200 * time.Millisecond
	const callers = 12
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	lease := 500 * time.Millisecond
	l := leaseReplicas(t, srv, 1, Config{Limits: []Limit{PerHour(10_000)}, Lease: lease, FailurePolicy: FailError, StorageTimeout: timeout})[0]
	takeUntilLeased(t, l, "k")
	for range 20 {
		requireAllowed(t, l, "k")
	}
	leaseAgain(t, l, "k", lease)
	wait := stall(t, srv, 4*time.Second)
	var mu sync.Mutex
	var longest time.Duration
	failed := 0
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			_, err := l.Take(context.Background(), "k", 1)
			took := time.Since(began)
			mu.Lock()
			defer mu.Unlock()
			longest = max(longest, took)
			if err != nil {
				failed++
			}
		}()
	}
	wg.Wait()
	t.Logf("%d callers, StorageTimeout %v: %d failed, the longest waited %v", callers, timeout, failed, longest)
	assert.Equal(t, callers, failed, "FailError: every take gets the store's error")
	assert.Less(t, longest, 3*timeout, "a take waited for other takes' grants, one after another")
	wait()
	leaseSettled(t, []*Limiter{l})
}

// A grant that times out may still be counted: a stalled Redis runs the
// script it has read once it wakes. The exact path loses a take's cost
// that way, and a grant its whole share (a key's use of a lease, at most
// half the room it has left), as a crashed replica's. After a grant
// fails the key is not leased again for a lease, and its next share is
// small: a stall of half a second with three takes on a busy key strands
// at most one share, never the key's whole window (here an hour).
func TestLeaseGrantsThatTimedOut(t *testing.T) {
	const timeout = 50 * time.Millisecond
	lim := PerHour(1000)
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	lease := 500 * time.Millisecond
	l := leaseReplicas(t, srv, 1, Config{Limits: []Limit{lim}, Lease: lease, StorageTimeout: timeout})[0]
	admitted := 0
	for range 200 {
		requireAllowed(t, l, "k")
		admitted++
	}
	leaseAgain(t, l, "k", lease)
	require.Equal(t, []int{lim.Max - admitted}, storeRemaining(t, l, "k"))
	wait := stall(t, srv, 500*time.Millisecond)
	timedOut := 0
	for range 3 {
		res, err := l.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		if res.Allowed() {
			admitted++ // the fallback's: counted in memory only
		} else {
			timedOut++ // the store may yet count it
		}
	}
	wait()
	waitFor(t, "the store to answer", func() bool {
		res, err := l.Take(context.Background(), "k", 0)
		return err == nil && res.Source() == SourceBackend
	})
	leaseSettled(t, []*Limiter{l})
	left := storeRemaining(t, l, "k")[0]
	t.Logf("%d admitted, %d takes timed out in the stall; the store has %d left (the exact path: at least %d)",
		admitted, timedOut, left, lim.Max-admitted-timedOut)
	// At most one share (half the 800 left) and a unit a timed-out take.
	assert.GreaterOrEqual(t, left, (lim.Max-200)/2-timedOut, "the stall stranded more than one share")
}

// onLimit returns takes with limit i's Decision in the place of the
// first's, for the checks of lease_exact_test.go, which read the first.
func onLimit(takes []leaseTake, i int) []leaseTake {
	out := make([]leaseTake, len(takes))
	for j, tk := range takes {
		tk.res.each[0] = tk.res.each[i]
		out[j] = tk
	}
	return out
}

// Two limits of different windows leased together (one shorter than the
// lease), under the random traffic of TestLeaseRandomTrafficStaysExact:
// what was admitted never exceeds what the exact path allows under
// either limit.
func TestLeaseSeveralLimitsRandomTrafficStaysExact(t *testing.T) {
	limits := []Limit{{Max: 25, Expiration: 250 * time.Millisecond}, {Max: 60, Expiration: time.Second}}
	for _, alg := range leaseAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			lease := 300 * time.Millisecond
			if alg == TokenBucket {
				// A bucket leases only while its debt lasts a lease: the
				// shorter limit's, at most 250 ms.
				lease = 100 * time.Millisecond
			}
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: limits, Lease: lease, StorageTimeout: slowMachine})
			g, lo, hi := randomTrafficOn(t, srv, ls)
			takes := g.admitted()
			leased := 0
			for _, tk := range takes {
				if tk.res.Source() == SourceLease {
					leased++
				}
			}
			t.Logf("%d takes, %d admitted, %d from shares", len(g.takes), len(takes), leased)
			require.Positive(t, leased, "the key was leased")
			for i, lim := range limits {
				require.Equal(t, int64(1), ls[0].base.r[i].stepMillis(), "the checks read countedIn as Redis ms")
				switch alg {
				case FixedWindow:
					checkFixedWindows(t, onLimit(takes, i), lim, lo, hi)
				case SlidingWindow:
					checkSlidingWindows(t, onLimit(takes, i), lim, lo, hi)
				case TokenBucket:
					checkBucket(t, takes, lim)
				}
			}
			leaseSettled(t, ls)
		})
	}
}
