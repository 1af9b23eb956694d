package nethttp

import (
	"context"
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

// keyed sends GET / with X-Key key to h, under ctx, and returns the status.
func keyed(ctx context.Context, h http.Handler, key string) int {
	req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	req.Header.Set("X-Key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// A client that goes away while its request waits for its turn gives the
// turn back: the next request gets it, on the other replica of one
// Redis. Max 1 a second, MaxDelay 2.5 s: one now, one at 1 s (its client
// leaves), then the next request has the 1 s turn, and so the one after
// it the 2 s turn, within MaxDelay (had the 1 s turn been lost, it would
// need the 3 s one: a 429).
func TestMaxDelayCanceledClientGivesItsTurnBack(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	var replicas []http.Handler
	for range 2 {
		cfg := Config{Max: 1, Expiration: time.Second, MaxDelay: 2500 * time.Millisecond, Redis: server.Client(t), Name: "turns",
			KeyGenerator: func(r *http.Request) string { return r.Header.Get("X-Key") }}
		cfg.clock = clock.Load
		replicas = append(replicas, New(cfg)(http.HandlerFunc(ok)))
	}
	require.Equal(t, http.StatusOK, keyed(context.Background(), replicas[0], "k"))
	keys, err := admin.Keys(context.Background(), "*turns*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	first, err := admin.Get(context.Background(), keys[0]).Result()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var gone int
	wg.Go(func() { gone = keyed(ctx, replicas[0], "k") })
	for { // until its turn at 1 s is counted
		v, err := admin.Get(context.Background(), keys[0]).Result()
		require.NoError(t, err)
		if v != first {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	assert.Equal(t, http.StatusTooManyRequests, gone, "a waiter whose client left is not served")
	start := time.Now()
	assert.Equal(t, http.StatusOK, keyed(context.Background(), replicas[1], "k"))
	assert.GreaterOrEqual(t, time.Since(start), 800*time.Millisecond, "it waited for the turn")
	assert.Equal(t, http.StatusOK, keyed(context.Background(), replicas[0], "k"), "the 2 s turn is free: the 1 s one was given back")
}
