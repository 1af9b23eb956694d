package nethttp

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Replicas of NewConcurrency on one Redis, each with its own client, under
// requests that end every way a request can: served after a random time,
// the handler panicking, OnDecision panicking, a client that goes away
// while it waits (MaxDelay), rejected to a custom LimitReached, skipped
// by Next. Never more than Max handlers of the key run at once (but in a
// DryRun, which rejects nothing), and once all have ended Redis holds no
// slot.
func TestNewConcurrencyRedisHostileRequestsNeverOverMaxAndLeaveNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	for _, dryRun := range []bool{false, true} {
		t.Run(map[bool]string{false: "limiting", true: "DryRun"}[dryRun], func(t *testing.T) {
			hostileRequests(t, srv, dryRun)
		})
	}
}

// hostileRequests runs TestNewConcurrencyRedisHostileRequests... on srv,
// as a DryRun or not.
func hostileRequests(t *testing.T, srv *redistest.Server, dryRun bool) {
	admin := srv.Client(t)
	const max = 2
	var inFlight, most, served, limited atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Skip") != "" {
			return // not limited: not counted
		}
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		served.Add(1)
		time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
		if r.Header.Get("X-Panic") != "" {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusTeapot)
	})
	replicas := make([]http.Handler, 3)
	for i := range replicas {
		replicas[i] = NewConcurrency(Config{Max: max, Expiration: time.Minute, MaxDelay: 20 * time.Millisecond,
			Name: "hostile", DryRun: dryRun, Redis: srv.Client(t), FailurePolicy: FailClosed,
			KeyGenerator: func(*http.Request) string { return "k" },
			Next:         func(r *http.Request) bool { return r.Header.Get("X-Skip") != "" },
			OnDecision: func(r *http.Request, _ DecisionEvent) {
				if r.Header.Get("X-Hook-Panic") != "" {
					panic("hook")
				}
			},
			LimitReached: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				limited.Add(1)
				w.WriteHeader(http.StatusTooManyRequests)
			}),
		})(handler)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 12 {
				ctx, cancel := context.WithCancel(context.Background())
				req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
				switch rand.N(6) {
				case 0:
					req.Header.Set("X-Panic", "1")
				case 1:
					req.Header.Set("X-Hook-Panic", "1")
				case 2:
					time.AfterFunc(time.Duration(rand.N(5000))*time.Microsecond, cancel)
				case 3:
					req.Header.Set("X-Skip", "1")
				}
				func() {
					defer func() {
						if p := recover(); p != nil && p != "hook" && !errors.Is(p.(error), http.ErrAbortHandler) {
							t.Errorf("unexpected panic %v", p)
						}
					}()
					replicas[i%len(replicas)].ServeHTTP(httptest.NewRecorder(), req)
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	assert.Positive(t, served.Load())
	if !dryRun {
		assert.LessOrEqual(t, most.Load(), int64(max), "limited handlers of the key at once")
		assert.Positive(t, limited.Load())
	}
	keys, err := admin.Keys(context.Background(), "*slots*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		n, err := admin.ZCard(context.Background(), k).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "slots left in %q", k)
	}
}
