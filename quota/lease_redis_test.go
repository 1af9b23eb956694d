package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leaseReplicas returns n limiters of cfg on srv, each with a client of
// its own, as replicas of one service would be.
func leaseReplicas(t *testing.T, srv *redistest.Server, n int, cfg Config) []*Limiter {
	t.Helper()
	ls := make([]*Limiter, n)
	for i := range ls {
		c := cfg
		c.Redis = srv.Client(t)
		if c.Name == "" {
			c.Name = "replicas" // one count, shared
		}
		l, err := New(c)
		require.NoError(t, err)
		ls[i] = l
	}
	return ls
}

// scriptCalls is how many scripts srv has run.
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	calls, _ := redistest.CommandStats(t, srv.Client(t))
	return calls["evalsha"] + calls["eval"]
}

// Three replicas with leases, 48 callers, one key, 6000 takes against
// 2000 an hour: never more than 2000 admitted, nearly all of them, and
// at most one script call per 10 decisions.
func TestLeaseReplicasAdmitAtMostTheLimit(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 3, Config{Algorithm: alg, Limits: []Limit{PerHour(2000)}, Lease: 500 * time.Millisecond, StorageTimeout: slowMachine})
			before := scriptCalls(t, srv)
			var admitted, decided atomic.Int64
			var wg sync.WaitGroup
			for c := range 48 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := ls[c%3]
					for range 6000 / 48 {
						res, err := l.Take(context.Background(), "hot", 1)
						if !assert.NoError(t, err) {
							return
						}
						decided.Add(1)
						if res.Allowed() {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			calls := scriptCalls(t, srv) - before
			t.Logf("%s: admitted %d of %d; %d script calls", alg, admitted.Load(), decided.Load(), calls)
			assert.LessOrEqual(t, admitted.Load(), int64(2000))
			assert.GreaterOrEqual(t, admitted.Load(), int64(1900))
			assert.LessOrEqual(t, calls*10, int(decided.Load()), "script calls per decision")
			leaseSettled(t, ls)
		})
	}
}

// A replica that takes a share of a window and goes quiet gives it back
// when the lease ends, so another replica then admits exactly what is
// left. (A token bucket's unused units refill instead: see
// TestLeaseBucketShareSpentAfterAnEarlierReturn.)
func TestLeaseQuietReplicaGivesBack(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ls := leaseReplicas(t, srv, 2, Config{Algorithm: alg, Limits: []Limit{PerHour(100)}, Lease: 300 * time.Millisecond, StorageTimeout: slowMachine})
			ctx := context.Background()
			a, b := ls[0], ls[1]
			admittedA := 0
			for range 10 {
				res, err := a.Take(ctx, "k", 1)
				require.NoError(t, err)
				if res.Allowed() {
					admittedA++
				}
			}
			require.Equal(t, 10, admittedA)
			time.Sleep(600 * time.Millisecond) // a's lease ends, and what it held goes back
			admittedB := 0
			for range 200 {
				res, err := b.Take(ctx, "k", 1)
				require.NoError(t, err)
				if res.Allowed() {
					admittedB++
				}
			}
			assert.Equal(t, 90, admittedB, fmt.Sprintf("b admits the rest of %s's quota", alg))
			leaseSettled(t, ls)
		})
	}
}
