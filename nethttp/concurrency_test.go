package nethttp

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// NewConcurrency caps a key's requests in flight: Max 2, five at once
// with a handler that holds until all are decided: 2 run, 3 get 429.
func TestNewConcurrencyCapsRequestsInFlight(t *testing.T) {
	var decided sync.WaitGroup
	var seen atomic.Int64
	decided.Add(5)
	release := make(chan struct{})
	h := NewConcurrency(Config{Max: 2, Expiration: time.Minute,
		KeyGenerator: func(r *http.Request) string { return r.Header.Get("X-Key") },
		OnDecision: func(*http.Request, DecisionEvent) {
			if seen.Add(1) <= 5 {
				decided.Done()
			}
		},
	})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		<-release
		w.WriteHeader(http.StatusOK)
	}))
	codes := make(chan int, 5)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { codes <- keyed(context.Background(), h, "k") })
	}
	decided.Wait()
	close(release)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 2, http.StatusTooManyRequests: 3}, count)
	assert.Equal(t, http.StatusOK, keyed(context.Background(), h, "k"), "the slots came back")
	assert.Panics(t, func() { NewConcurrency(Config{SkipFailedRequests: true}) })
}
