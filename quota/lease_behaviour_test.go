package quota

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leaseAlgorithms are the algorithms a Lease works with.
var leaseAlgorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket}

// takeUntilLeased takes 1 for key from l until a take is answered from a
// share, and returns how many it took.
func takeUntilLeased(t *testing.T, l *Limiter, key string) int {
	t.Helper()
	for n := 1; n <= 50; n++ {
		if res := requireAllowed(t, l, key); res.Source() == SourceLease {
			return n
		}
	}
	t.Fatalf("%s: no take was answered from a share", key)
	return 0
}

// storeRemaining is each limit's Remaining for key in the store, as a
// take of 0 (which leases never answer) sees it.
func storeRemaining(t *testing.T, l *Limiter, key string) []int {
	t.Helper()
	res, err := l.Take(context.Background(), key, 0)
	require.NoError(t, err)
	require.Equal(t, SourceBackend, res.Source())
	var out []int
	for _, d := range res.Decisions() {
		out = append(out, d.Remaining)
	}
	return out
}

// New refuses a Lease with the options a share cannot keep, and a Lease
// outside 1 ms to 1 h, naming the field.
func TestLeaseConfigErrors(t *testing.T) {
	lim := []Limit{PerMinute(10)}
	cases := []struct {
		name string
		cfg  Config
		want string // in the error; "" for none
	}{
		{"SlidingLog", Config{Algorithm: SlidingLog, Limits: lim, Lease: time.Second}, "SlidingLog"},
		{"BlockFor", Config{Limits: lim, Lease: time.Second, BlockFor: time.Second}, "BlockFor"},
		{"MinInterval", Config{Limits: lim, Lease: time.Second, MinInterval: time.Second}, "MinInterval"},
		{"VaryMax", Config{Limits: lim, Lease: time.Second, VaryMax: true}, "VaryMax"},
		{"VaryExpiration", Config{Limits: lim, Lease: time.Second, VaryExpiration: true}, "VaryExpiration"},
		{"below 1ms", Config{Limits: lim, Lease: 999 * time.Microsecond}, "1ms"},
		{"negative", Config{Limits: lim, Lease: -time.Second}, "1ms"},
		{"above 1h", Config{Limits: lim, Lease: time.Hour + time.Millisecond}, "1h"},
		{"1ms", Config{Limits: lim, Lease: time.Millisecond}, ""},
		{"1h", Config{Limits: lim, Lease: time.Hour}, ""},
		{"TokenBucket", Config{Algorithm: TokenBucket, Limits: lim, Lease: time.Second}, ""},
		{"SlidingLog without Lease", Config{Algorithm: SlidingLog, Limits: lim}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "Lease")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Several limits are leased together: three replicas admit at most the
// tightest, and once the shares have gone back each limit's count in
// the store is exactly what was admitted.
func TestLeaseSeveralLimits(t *testing.T) {
	limits := []Limit{{Max: 400, Expiration: time.Hour}, {Max: 150, Expiration: time.Minute}}
	for _, alg := range leaseAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: limits, Lease: 200 * time.Millisecond, StorageTimeout: slowMachine})
			var admitted, leased atomic.Int64
			var wg sync.WaitGroup
			for c := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 25 {
						res, err := ls[c%3].Take(context.Background(), "k", 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed() {
							admitted.Add(1)
							if res.Source() == SourceLease {
								leased.Add(1)
							}
						}
					}
				}()
			}
			wg.Wait()
			leaseSettled(t, ls)
			n := admitted.Load()
			t.Logf("%s: %d admitted, %d from shares", alg, n, leased.Load())
			assert.LessOrEqual(t, n, int64(150))
			assert.GreaterOrEqual(t, n, int64(140))
			assert.Positive(t, leased.Load())
			left := storeRemaining(t, ls[0], "k")
			// A bucket of 150 a minute refills 2.5 units a second: allow
			// what the test's few seconds refill.
			slack := 0
			if alg == TokenBucket {
				slack = 10
			}
			for i, lim := range limits {
				assert.GreaterOrEqual(t, left[i], lim.Max-int(n), "limit %d", i)
				assert.LessOrEqual(t, left[i], lim.Max-int(n)+slack, "limit %d: the store gave back more than was left", i)
			}
		})
	}
}

// A take of more than the key's share holds is decided by a new grant
// (at least its cost) or by the store; the costs admitted add up to the
// limit exactly, and a cost above the limit is never admitted. (Between
// steps the shares go back: see TestLeaseCostOfAllThatIsLeft for a take
// that meets the units of a share on their way back. A token bucket's
// shares give nothing back, so its costs add up to less.)
func TestLeaseCostLargerThanShare(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			l := leaseReplicas(t, srv, 1, Config{Algorithm: alg, Limits: []Limit{PerHour(50)}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})[0]
			ctx := context.Background()
			taken := takeUntilLeased(t, l, "k")
			steps := []struct {
				cost    int
				allowed bool
			}{{20, true}, {20, true}, {50 - taken - 40 + 1, false}, {50 - taken - 40, true}, {1, false}}
			for i, st := range steps {
				res, err := l.Take(ctx, "k", st.cost)
				require.NoError(t, err)
				require.Equal(t, st.allowed, res.Allowed(), "step %d: cost %d (%v)", i, st.cost, res.Source())
				if !st.allowed {
					assert.Positive(t, res.RetryAfter(), "step %d", i)
					assert.NotEqual(t, Never, res.RetryAfter(), "step %d: a cost that fits the limit", i)
				}
				leaseSettled(t, []*Limiter{l})
			}
			res, err := l.Take(ctx, "k", 51)
			require.NoError(t, err)
			assert.False(t, res.Allowed())
			assert.Equal(t, Never, res.RetryAfter())
			assert.Equal(t, []int{0}, storeRemaining(t, l, "k"), "the store counts all 50")
		})
	}
}

// One replica, a share out with a little room, and a take of exactly
// what the key has left, more than the share holds: the exact path
// admits it. The share's units go back when the take asks for a new
// share, but on the limiter's timer, after the grant is sent: the grant
// finds them still counted, gets less than the cost, and the take is
// rejected, though nobody else took anything.
func TestLeaseCostOfAllThatIsLeft(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			l := leaseReplicas(t, srv, 1, Config{Algorithm: alg, Limits: []Limit{PerHour(50)}, Lease: time.Second, StorageTimeout: slowMachine})[0]
			taken := takeUntilLeased(t, l, "k")
			s := l.decider.(*leasedStore)
			sh := s.shard("k")
			sh.mu.Lock()
			share := *sh.keys["k"].share
			sh.mu.Unlock()
			require.Less(t, share.used, share.taken, "the share has room")
			res, err := l.Take(context.Background(), "k", 50-taken)
			require.NoError(t, err)
			assert.True(t, res.Allowed(), "a take of the %d left, the share holding %d of them: %v, RetryAfter %v",
				50-taken, share.taken-share.used, res.Source(), res.RetryAfter())
			leaseSettled(t, []*Limiter{l})
		})
	}
}

// Refunds of takes admitted from a window's share give back exactly their
// cost, whether the share is still out (to the share) or has gone back
// (to the store): another replica then admits exactly what is left. A
// refund of a take the share rejected gives nothing back. A token bucket
// with leases takes no refund.
func TestLeaseRefunds(t *testing.T) {
	for _, alg := range leaseAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 2, Config{Algorithm: alg, Limits: []Limit{PerHour(50)}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})
			a, b, ctx := ls[0], ls[1], context.Background()
			var leased []Result
			for range 20 {
				if res := requireAllowed(t, a, "k"); res.Source() == SourceLease {
					leased = append(leased, res)
				}
			}
			require.GreaterOrEqual(t, len(leased), 10)
			if alg == TokenBucket {
				// A bucket with leases takes no refund (see
				// TestLeaseBucketShareSpentAfterAnEarlierReturn): an
				// error, and nothing credited.
				before := storeRemaining(t, b, "k")
				for _, res := range leased {
					after, err := a.Refund(ctx, "k", 1, &res)
					require.ErrorIs(t, err, errLeasedBucketRefund)
					assert.Equal(t, res, after, "the take's own Result back")
				}
				assert.Equal(t, before, storeRemaining(t, b, "k"))
				leaseSettled(t, ls)
				return
			}
			// The last five, of the share still out, give back to it; the
			// five before, whose shares may have gone back, and then the
			// last five again once theirs has, to the store or to no share.
			last := leased[len(leased)-1].lease
			for _, res := range leased[len(leased)-5:] {
				require.Equal(t, last, res.lease, "the last five takes are of one share")
				after, err := a.Refund(ctx, "k", 1, &res)
				require.NoError(t, err)
				assert.Equal(t, SourceLease, after.Source(), "a refund to a share that is out")
			}
			leaseSettled(t, ls)
			left, source := 40, SourceBackend
			for _, res := range leased[len(leased)-10 : len(leased)-5] {
				after, err := a.Refund(ctx, "k", 1, &res)
				require.NoError(t, err)
				assert.Equal(t, source, after.Source(), "a refund after the share went back")
			}
			assert.Equal(t, []int{left}, storeRemaining(t, b, "k"))
			n := 0
			var rejected Result
			for range 60 {
				res, err := b.Take(ctx, "k", 1)
				require.NoError(t, err)
				if res.Allowed() {
					n++
				} else {
					rejected = res
				}
			}
			assert.Equal(t, left, n, "the other replica admits what is left")
			after, err := b.Refund(ctx, "k", 1, &rejected)
			require.NoError(t, err)
			assert.False(t, after.Allowed())
			leaseSettled(t, ls)
			assert.Equal(t, []int{0}, storeRemaining(t, a, "k"), "a rejected take's refund gave nothing back")
		})
	}
}

// The Result of a take decided from a share: Source SourceLease,
// Remaining the key's remaining at the grant less this replica's use
// since (one replica here, so exactly the limit less what was admitted),
// never negative, and a ResetAfter within the window; a take the share
// rejects has Source SourceLease, Remaining 0 and a RetryAfter after
// which the same take is admitted.
func TestLeaseResults(t *testing.T) {
	for _, alg := range leaseAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			l := leaseReplicas(t, srv, 1, Config{Algorithm: alg, Limits: []Limit{{Max: 30, Expiration: 2 * time.Second}}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})[0]
			ctx := context.Background()
			admitted, leased := 0, 0
			var rejected Result
			for range 40 {
				res, err := l.Take(ctx, "k", 1)
				require.NoError(t, err)
				d := res.Tightest()
				assert.GreaterOrEqual(t, d.Remaining, 0)
				if !res.Allowed() {
					rejected = res
					break
				}
				admitted++
				if res.Source() == SourceLease {
					leased++
					if alg == TokenBucket {
						// A bucket's returns credit only what will not have
						// refilled a lease on (creditLater): the key may show
						// less, never more than it has (30 a 2 s, 300 ms leases:
						// a few units refill meanwhile).
						assert.LessOrEqual(t, d.Remaining, 30-admitted+5, "take %d", admitted)
					} else {
						assert.Equal(t, 30-admitted, d.Remaining, "take %d", admitted)
					}
					assert.Positive(t, d.ResetAfter)
					assert.LessOrEqual(t, d.ResetAfter, 2*2*time.Second)
				}
			}
			require.Positive(t, leased)
			require.Equal(t, 30, admitted)
			// Rejections from the share (or the store's that its grant got).
			for range 5 {
				res, err := l.Take(ctx, "k", 1)
				require.NoError(t, err)
				require.False(t, res.Allowed())
				assert.Zero(t, res.Tightest().Remaining)
				assert.Positive(t, res.RetryAfter())
				assert.LessOrEqual(t, res.RetryAfter(), 2*2*time.Second) // a sliding window's counts last two windows
				if res.Source() == SourceLease {
					rejected = res
				}
			}
			require.Equal(t, SourceLease, rejected.Source(), "rejections are answered from the lease")
			time.Sleep(rejected.RetryAfter() + 20*time.Millisecond)
			res, err := l.Take(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, res.Allowed(), "admitted after RetryAfter (%v)", res.Source())
			leaseSettled(t, []*Limiter{l})
		})
	}
}

// A rejection from a share tells the wait of the take's own cost: a take
// of 5 units waits at least as long as the store tells another replica
// for the same take, not the wait of a single unit.
func TestLeaseRejectionRetryAfterOfItsCost(t *testing.T) {
	for _, alg := range []Algorithm{SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 2, Config{Algorithm: alg, Limits: []Limit{{Max: 10, Expiration: time.Second}}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})
			// The same limiter without a lease, on the same count.
			direct := redisLimiter(t, Config{Algorithm: alg, Limits: []Limit{{Max: 10, Expiration: time.Second}}, Name: "replicas", Redis: srv.Client(t), StorageTimeout: slowMachine})
			a, ctx := ls[0], context.Background()
			for {
				res, err := a.Take(ctx, "k", 1)
				require.NoError(t, err)
				if !res.Allowed() {
					break
				}
			}
			leased, err := a.Take(ctx, "k", 5)
			require.NoError(t, err)
			stored, err := direct.Take(ctx, "k", 5)
			require.NoError(t, err)
			require.False(t, leased.Allowed())
			require.False(t, stored.Allowed())
			require.Equal(t, SourceBackend, stored.Source())
			t.Logf("%s: from the lease (%v) %v, from the store %v", alg, leased.Source(), leased.RetryAfter(), stored.RetryAfter())
			assert.GreaterOrEqual(t, leased.RetryAfter(), stored.RetryAfter()-20*time.Millisecond,
				"a take of 5 rejected by the lease is told to come back before 5 units can be there")
			leaseSettled(t, ls)
		})
	}
}

// The lease table stays within MaxKeys however many keys are hot, and
// once its keys go quiet new ones are leased again.
func TestLeaseTableBounded(t *testing.T) {
	srv := redistest.Start(t)
	const maxKeys = 640 // 10 keys in each of the 64 shards
	l := leaseReplicas(t, srv, 1, Config{Limits: []Limit{PerHour(1000)}, Lease: 100 * time.Millisecond, MaxKeys: maxKeys, StorageTimeout: slowMachine})[0]
	s := l.decider.(*leasedStore)
	tracked := func() int {
		n := 0
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			n += len(sh.keys)
			sh.mu.Unlock()
		}
		return n
	}
	leasedKeys := 0
	for k := range 3000 {
		key := "k" + strconv.Itoa(k)
		for range 6 {
			if res := requireAllowed(t, l, key); res.Source() == SourceLease {
				leasedKeys++
				break
			}
		}
		require.LessOrEqual(t, tracked(), maxKeys)
	}
	t.Logf("%d of 3000 hot keys leased, %d tracked", leasedKeys, tracked())
	assert.Positive(t, leasedKeys)
	assert.Less(t, leasedKeys, 3000, "the table could not track every key")
	leaseSettled(t, []*Limiter{l})
	time.Sleep(250 * time.Millisecond) // two leases: every entry is idle
	for k := range 200 {
		key := "again" + strconv.Itoa(k)
		takeUntilLeased(t, l, key)
		require.LessOrEqual(t, tracked(), maxKeys)
	}
	leaseSettled(t, []*Limiter{l})
}
