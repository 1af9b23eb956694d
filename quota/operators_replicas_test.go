package quota

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// operatorReachSlack is what a loaded machine may add to the second in
// which an operator's call reaches every replica: the polling below, and
// a script call's round trip.
const operatorReachSlack = 500 * time.Millisecond

// untilTaken takes 1 for key from l every 10 ms until the take's
// admission is want, and returns how long that took; it fails after 5 s.
func untilTaken(t *testing.T, l *Limiter, key string, want bool) (time.Duration, Result) {
	t.Helper()
	start := time.Now()
	for {
		res, err := l.Take(context.Background(), key, 1)
		require.NoError(t, err)
		if res.Allowed() == want {
			return time.Since(start), res
		}
		require.Less(t, time.Since(start), 5*time.Second, "the take stayed admitted=%v (%v)", !want, res.Source())
		time.Sleep(10 * time.Millisecond)
	}
}

// Two replicas, each with its own client, every algorithm, without
// leases and with them: ten peeks on each count nothing; a key exhausted
// on both, their deny caches (or lease entries) holding its rejection,
// is admitted on the other replica within a second of a Reset on one
// (and at once on that one); a Block of an hour on one makes the other
// reject within a second, with a RetryAfter of about the hour; a Reset on
// the other lifts it, on both.
func TestOperatorsReachEveryReplica(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		for _, lease := range []time.Duration{0, time.Second} {
			name := alg.name() + "/nolease"
			if lease > 0 {
				name = alg.name() + "/lease"
			}
			t.Run(name, func(t *testing.T) {
				if lease > 0 && alg == SlidingLog {
					t.Skip("the log takes no Lease")
				}
				rs := leaseReplicas(t, srv, 2, Config{Algorithm: alg, Limits: []Limit{PerMinute(5)}, Lease: lease, Name: "ops" + name, StorageTimeout: slowMachine})
				a, b := rs[0], rs[1]
				key := "customer-42"
				requireAllowed(t, a, key)
				requireAllowed(t, b, key)
				for _, l := range rs {
					for range 10 {
						st, err := l.Peek(ctx, key)
						require.NoError(t, err)
						assert.True(t, st.Allowed())
						assert.False(t, st.Blocked())
					}
				}
				st, err := b.Peek(ctx, key)
				require.NoError(t, err)
				if lease == 0 {
					assert.Equal(t, 3, st.Tightest().Remaining, "twenty peeks counted nothing")
				}

				// Exhausted on both: each answers from what it keeps.
				untilTaken(t, a, key, false)
				untilTaken(t, b, key, false)
				for _, l := range rs {
					res, err := l.Take(ctx, key, 1)
					require.NoError(t, err)
					require.False(t, res.Allowed())
					require.Contains(t, []Source{SourceDenyCache, SourceLease}, res.Source(), "the replica answers the key itself")
				}
				st, err = a.Peek(ctx, key)
				require.NoError(t, err)
				assert.False(t, st.Allowed())
				assert.Positive(t, st.RetryAfter())
				assert.False(t, st.Blocked(), "spent, not blocked")

				require.NoError(t, a.Reset(ctx, key))
				reset := time.Now()
				requireAllowed(t, a, key) // this replica dropped its own at once
				took, _ := untilTaken(t, b, key, true)
				t.Logf("the other replica admitted %v after the Reset", took)
				assert.Less(t, time.Since(reset), time.Second+operatorReachSlack, "a Reset reaches every replica within a second")

				// Hot again on the other replica (a share, with leases), then
				// blocked on this one.
				for range 2 {
					requireAllowed(t, b, key)
				}
				st, err = a.Block(ctx, key, time.Hour)
				require.NoError(t, err)
				blocked := time.Now()
				assert.True(t, st.Blocked())
				assert.Equal(t, time.Hour, st.Held)
				assert.False(t, st.Allowed())
				res, err := a.Take(ctx, key, 1)
				require.NoError(t, err)
				assert.False(t, res.Allowed(), "blocked at once on this replica")
				took, res = untilTaken(t, b, key, false)
				t.Logf("the other replica rejected %v after the Block", took)
				assert.Less(t, time.Since(blocked), time.Second+operatorReachSlack, "a Block reaches every replica within a second")
				assert.InDelta(t, float64(time.Hour), float64(res.RetryAfter()), float64(5*time.Second), "Retry-After is the block's rest")
				assert.Zero(t, res.Tightest().Remaining)
				st, err = b.Peek(ctx, key)
				require.NoError(t, err)
				assert.InDelta(t, float64(time.Hour), float64(st.Held), float64(5*time.Second))

				require.NoError(t, b.Reset(ctx, key))
				lifted := time.Now()
				requireAllowed(t, b, key)
				untilTaken(t, a, key, true)
				assert.Less(t, time.Since(lifted), time.Second+operatorReachSlack, "Reset lifts a Block on every replica within a second")
			})
		}
	}
}

// Bad input to the operators is a clear error that changes nothing: an
// empty key, a Block of 0, a negative or a huge d, a key Redis refuses
// (longer than its proto-max-bulk-len), a limiter whose keys carry their
// window (VaryExpiration).
func TestOperatorsRefuseBadInput(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, onRedis := range []bool{false, true} {
		cfg := Config{Limits: []Limit{PerMinute(2)}, Name: "bad"}
		if onRedis {
			cfg.Redis = srv.Client(t)
		}
		l, err := New(cfg)
		require.NoError(t, err)
		_, err = l.Peek(ctx, "")
		assert.ErrorContains(t, err, "limiter: Peek: the key is empty")
		assert.ErrorContains(t, l.Reset(ctx, ""), "limiter: Reset: the key is empty")
		for _, d := range []time.Duration{0, -time.Second, 366 * 24 * time.Hour, 1<<63 - 1} {
			_, err = l.Block(ctx, "k", d)
			assert.ErrorContains(t, err, "limiter: Block: d is", "d %v", d)
		}
		requireAllowed(t, l, "k")
		requireAllowed(t, l, "k")
		st, err := l.Peek(ctx, "k")
		require.NoError(t, err)
		assert.False(t, st.Blocked(), "nothing was blocked")
		assert.Equal(t, 0, st.Tightest().Remaining)

		vary := cfg
		vary.VaryExpiration, vary.Name = true, "vary"
		v, err := New(vary)
		require.NoError(t, err)
		_, err = v.Peek(ctx, "k")
		assert.ErrorContains(t, err, "VaryExpiration")
	}

	// A key beyond what Redis takes in one argument.
	rdb := srv.Client(t)
	require.NoError(t, rdb.ConfigSet(ctx, "proto-max-bulk-len", "1mb").Err())
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "proto-max-bulk-len", "512mb") })
	l, err := New(Config{Limits: []Limit{PerMinute(2)}, Name: "huge", Redis: srv.Client(t), FailurePolicy: FailError, StorageTimeout: slowMachine})
	require.NoError(t, err)
	huge := string(make([]byte, 2<<20))
	_, err = l.Block(ctx, huge, time.Minute)
	assert.ErrorContains(t, err, "limiter: redis block")
	assert.Error(t, l.Reset(ctx, huge))
	keys, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, keys, int64(2), "nothing written but the limiters' probe keys")
}

// On a Redis Cluster of 3 masters, with 2 replicas each with its own
// cluster client: keys on every master are peeked without counting,
// blocked on one replica and rejected on the other (its Retry-After the
// block's), and reset on the other, after which both admit them again.
func TestOperatorsOnACluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	var rs []*Limiter
	for range 2 {
		l, err := New(Config{Limits: []Limit{PerMinute(3)}, Redis: cluster.Client(t), Name: "cluster-ops", StorageTimeout: 10 * time.Second})
		require.NoError(t, err)
		rs = append(rs, l)
	}
	a, b := rs[0], rs[1]
	for k := range 9 { // keys over every master
		key := "customer-" + strconv.Itoa(k)
		requireAllowed(t, a, key)
		for range 5 {
			st, err := b.Peek(ctx, key)
			require.NoError(t, err)
			require.Equal(t, 2, st.Tightest().Remaining, "%s: peeks count nothing", key)
		}
		st, err := a.Block(ctx, key, time.Hour)
		require.NoError(t, err)
		require.Equal(t, time.Hour, st.Held)
		res, err := b.Take(ctx, key, 1)
		require.NoError(t, err)
		require.False(t, res.Allowed(), "%s: held on the other replica", key)
		require.InDelta(t, float64(time.Hour), float64(res.RetryAfter()), float64(5*time.Second))
		require.NoError(t, b.Reset(ctx, key))
		requireAllowed(t, b, key)
		took, _ := untilTaken(t, a, key, true)
		require.Less(t, took, time.Second+operatorReachSlack, "%s: Reset reaches the other replica", key)
	}
}
