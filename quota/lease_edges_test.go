package quota

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// leasedCount is how many of takes were answered from a share.
func leasedCount(takes []leaseTake) int {
	n := 0
	for _, tk := range takes {
		if tk.res.Source() == SourceLease {
			n++
		}
	}
	return n
}

// Token buckets of other shapes than the usual one, under 5 s of the
// random traffic of TestLeaseRandomTrafficStaysExact (a seed of its own
// each run): a burst above the rate, one below it, and two limits of
// different rates and bursts leased together. Bursts drain the buckets
// and quiet spells refill them around the lease boundaries; what was
// admitted never exceeds what a bucket allows, under every limit.
func TestLeaseBucketShapesStayExact(t *testing.T) {
	cases := []struct {
		name   string
		limits []Limit
		lease  time.Duration
	}{
		{"burst above rate", []Limit{{Max: 60, Expiration: time.Second, Burst: 150}}, 200 * time.Millisecond},
		{"burst below rate", []Limit{{Max: 60, Expiration: time.Second, Burst: 20}}, 150 * time.Millisecond},
		{"two rates", []Limit{{Max: 60, Expiration: time.Second, Burst: 90}, {Max: 200, Expiration: 5 * time.Second, Burst: 30}}, 150 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: TokenBucket, Limits: c.limits, Lease: c.lease, StorageTimeout: slowMachine})
			g := newLeaseLog()
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			randomLeaseTraffic(t, g, ls, "k", 5*time.Second, seed)
			takes := g.admitted()
			t.Logf("%d takes, %d admitted, %d from shares", len(g.takes), len(takes), leasedCount(takes))
			require.Positive(t, leasedCount(takes), "the key was leased")
			for _, lim := range c.limits {
				checkBucket(t, takes, lim)
			}
			leaseSettled(t, ls)
		})
	}
}

// Windows shorter than the lease (a share ends with its window, well
// before Config.Lease), and windows whose boundaries fall inside leases,
// with the unused units of a share going back after its window ended:
// nothing is spent outside the window that counted it, and no window
// admits more than its Max.
func TestLeaseWindowsAgainstLeaseLength(t *testing.T) {
	cases := []struct {
		name  string
		lim   Limit
		lease time.Duration
	}{
		{"window of a fifth of the lease", Limit{Max: 12, Expiration: 200 * time.Millisecond}, time.Second},
		{"boundaries mid-lease", Limit{Max: 42, Expiration: 700 * time.Millisecond}, 400 * time.Millisecond},
	}
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		for _, c := range cases {
			t.Run(alg.String()+"/"+c.name, func(t *testing.T) {
				srv := redistest.Start(t)
				ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: []Limit{c.lim}, Lease: c.lease, StorageTimeout: slowMachine})
				require.Equal(t, int64(1), ls[0].base.r[0].stepMillis(), "the checks read countedIn as Redis ms")
				g := newLeaseLog()
				admin := srv.Client(t)
				lo1, hi1 := g.redisOffset(t, admin)
				seed := rand.Uint64()
				t.Logf("seed %d", seed)
				randomLeaseTraffic(t, g, ls, "k", 4*time.Second, seed)
				lo2, hi2 := g.redisOffset(t, admin)
				takes := g.admitted()
				t.Logf("%d takes, %d admitted, %d from shares", len(g.takes), len(takes), leasedCount(takes))
				checkExact(t, alg, g, c.lim, min(lo1, lo2), max(hi1, hi2))
				leaseSettled(t, ls)
			})
		}
	}
}

// heatSlots are the two counters of the sketch that count the key of hash h.
func heatSlots(h uint64) (uint64, uint64) {
	return h >> (64 - leaseHeatBits), h >> 6 & (leaseHeatSlots - 1)
}

// collidingKeys returns two keys of s's sketch, one sharing key's first
// counter and the other its second: busy, they make key look busy.
func collidingKeys(t *testing.T, s *leasedStore, key string) (string, string) {
	t.Helper()
	want0, want1 := heatSlots(maphash.String(s.seed, key))
	var first, second string
	for i := 0; first == "" || second == ""; i++ {
		require.Less(t, i, 1<<22, "no colliding key found")
		k := "busy" + strconv.Itoa(i)
		s0, s1 := heatSlots(maphash.String(s.seed, k))
		if s0 == want0 && first == "" {
			first = k
		}
		if s1 == want1 && second == "" && k != first {
			second = k
		}
	}
	return first, second
}

// A key taken once or twice whose sketch counters collide with busy keys'
// is a key of a few takes: it may get an entry in the table, but not a
// share, which would count in the store units its few takes never spend
// (a window's until the lease ends, a bucket's for good). Another
// replica then finds the key's quota less only by its takes.
func TestLeaseColdKeyCollidingWithBusyKeys(t *testing.T) {
	lim := PerHour(10)
	for _, alg := range leaseAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 2, Config{Algorithm: alg, Limits: []Limit{lim}, Lease: 2 * time.Second, StorageTimeout: slowMachine})
			a, b := ls[0], ls[1]
			s := a.decider.(*leasedStore)
			b0, b1 := collidingKeys(t, s, "cold")
			for _, busy := range []string{b0, b1} {
				for range 8 {
					requireAllowed(t, a, busy)
				}
			}
			// Two takes: a bucket's first goes to the store, telling the
			// debt a share would be granted on.
			takes := 1
			if alg == TokenBucket {
				takes = 2
			}
			for range takes {
				requireAllowed(t, a, "cold")
			}
			left := storeRemaining(t, b, "cold")
			assert.Equal(t, []int{lim.Max - takes}, left,
				"%d take(s) of a cold key on the replica whose sketch it collides in counted %d units in the store", takes, lim.Max-left[0])
			leaseSettled(t, ls)
		})
	}
}

// Takes admitted from window shares of short leases, refunded at once or
// a moment later by many goroutines, so that refunds race the timer that
// ends the shares and gives their unused units back: each refund credits
// once, to the share or to the store, so that once every share has gone
// back the store counts exactly the takes that were not refunded.
func TestLeaseRefundsRacingShareEnds(t *testing.T) {
	lim := PerHour(5000)
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: []Limit{lim}, Lease: 20 * time.Millisecond, StorageTimeout: slowMachine})
			var wg sync.WaitGroup
			var leased, kept, toShare, toStore atomic.Int64
			end := time.Now().Add(3 * time.Second)
			for c := range 24 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(c), 7))
					l := ls[c%len(ls)]
					for time.Now().Before(end) {
						res, err := l.Take(context.Background(), "k", 1)
						if !assert.NoError(t, err) || !assert.True(t, res.Allowed()) {
							return
						}
						if res.Source() == SourceLease {
							leased.Add(1)
						}
						if d := rng.IntN(25); d > 2 {
							time.Sleep(time.Duration(d) * time.Millisecond)
						}
						if rng.IntN(5) == 0 {
							kept.Add(1) // spent: counted to the end
							continue
						}
						after, err := l.Refund(context.Background(), "k", 1, &res)
						if !assert.NoError(t, err) {
							return
						}
						if after.Source() == SourceLease {
							toShare.Add(1)
						} else {
							toStore.Add(1)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d takes from shares; %d kept, %d refunded to a share, %d to the store", leased.Load(), kept.Load(), toShare.Load(), toStore.Load())
			require.Positive(t, toShare.Load(), "refunds to a share that was out")
			require.Positive(t, toStore.Load(), "refunds after the share went back")
			require.Less(t, kept.Load(), int64(lim.Max))
			leaseSettled(t, ls)
			assert.Equal(t, []int{lim.Max - int(kept.Load())}, storeRemaining(t, ls[0], "k"), "every refund credited once")
		})
	}
}

// Limiters dropped with shares out and returns queued: once the garbage
// collector has them, their timers end every share within a lease and
// give a window's unused units back, and no goroutine of theirs is left.
func TestLeaseDroppedLimitersLeaveNothing(t *testing.T) {
	srv := redistest.Start(t)
	lease := 300 * time.Millisecond
	lim := PerHour(1000)
	before := goleak.IgnoreCurrent()
	spent := map[Algorithm]map[string]int{}
	func() {
		for _, alg := range leaseAlgorithms {
			spent[alg] = map[string]int{}
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Name: "dropped-" + alg.String(), Limits: []Limit{lim}, Lease: lease, StorageTimeout: slowMachine})
			for k := range 20 {
				key := "k" + strconv.Itoa(k)
				for _, l := range ls {
					spent[alg][key] += takeUntilLeased(t, l, key)
				}
			}
		}
	}()
	for range 3 {
		runtime.GC()
	}
	time.Sleep(2 * lease)
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		check := leaseReplicas(t, srv, 1, Config{Algorithm: alg, Name: "dropped-" + alg.String(), Limits: []Limit{lim}, StorageTimeout: slowMachine})[0]
		for key, n := range spent[alg] {
			assert.Equal(t, []int{lim.Max - n}, storeRemaining(t, check, key), "%v %s: the dropped replicas' shares went back", alg, key)
		}
	}
	goleak.VerifyNone(t, before)
}

// A flood of keys taken once each, enough of them in a lease that some
// keys' two sketch counters both count a few units of other keys: keys
// of one take get no share, whose grant and return would cost the store
// two calls where the take costs one, and would hold units of the key
// that its one take never spends.
func TestLeaseFloodOfOnceTakenKeysGetsNoShares(t *testing.T) {
	srv := redistest.Start(t)
	lim := PerHour(100)
	l := leaseReplicas(t, srv, 1, Config{Limits: []Limit{lim}, Lease: 8 * time.Second, StorageTimeout: slowMachine})[0]
	const keys, callers = 40000, 8
	var mu sync.Mutex
	var leased []string
	var wg sync.WaitGroup
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			for k := c; k < keys; k += callers {
				key := "once" + strconv.Itoa(k)
				res, err := l.Take(context.Background(), key, 1)
				if !assert.NoError(t, err) || !assert.True(t, res.Allowed()) {
					return
				}
				if res.Source() == SourceLease {
					mu.Lock()
					leased = append(leased, key)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	held := 0
	for _, key := range leased {
		held += lim.Max - 1 - storeRemaining(t, l, key)[0]
	}
	t.Logf("%d of %d keys taken once (in %v) were leased, their shares holding %d units beyond the one take", len(leased), keys, took, held)
	assert.Zero(t, len(leased), "keys taken once got shares")
	leaseSettled(t, []*Limiter{l})
}

// A table at its bound (one entry a shard) while a flood of new keys,
// each hot for a moment, wants in: a key that holds a share keeps its
// entry and goes on taking from shares; gone quiet for two leases, it
// gives its place up, and hot again once the flood is over, it is leased
// again.
func TestLeaseTableAtItsBoundKeepsBusyKeys(t *testing.T) {
	srv := redistest.Start(t)
	lease := 100 * time.Millisecond
	l := leaseReplicas(t, srv, 1, Config{Limits: []Limit{PerHour(100000)}, Lease: lease, MaxKeys: leaseShardCount, StorageTimeout: slowMachine})[0]
	s := l.decider.(*leasedStore)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for k := c; ; k += 4 {
				select {
				case <-stop:
					return
				default:
				}
				key := "flood" + strconv.Itoa(k)
				for range 5 {
					if _, err := l.Take(context.Background(), key, 1); !assert.NoError(t, err) {
						return
					}
				}
			}
		})
	}
	takeUntilLeased(t, l, "busy")
	fromShares := 0
	for range 300 {
		if res := requireAllowed(t, l, "busy"); res.Source() == SourceLease {
			fromShares++
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d of 300 takes of the busy key from shares during the flood", fromShares)
	assert.GreaterOrEqual(t, fromShares, 270, "the busy key kept its entry")
	sh := s.shard("busy")
	tracked := func() bool {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		_, ok := sh.keys["busy"]
		return ok
	}
	leaseSettled(t, []*Limiter{l})
	time.Sleep(3 * lease)
	// Another key of the busy key's shard takes its place.
	for k := 0; tracked(); k++ {
		require.Less(t, k, 100000, "the quiet key kept its place")
		key := "next" + strconv.Itoa(k)
		if s.shard(key) == sh {
			for range 4 {
				requireAllowed(t, l, key)
			}
		}
	}
	leaseSettled(t, []*Limiter{l})
	time.Sleep(3 * lease)
	takeUntilLeased(t, l, "busy")
	leaseSettled(t, []*Limiter{l})
}
