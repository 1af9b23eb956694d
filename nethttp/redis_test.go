package nethttp

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// Three servers, each with its own go-redis client, share one Redis:
// exactly Max of 200 concurrent requests are admitted, for each algorithm.
func TestExactAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindow, quota.TokenBucket, quota.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			var replicas []http.Handler
			for range 3 {
				client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 16})
				t.Cleanup(func() { _ = client.Close() })
				replicas = append(replicas, New(Config{
					Algorithm: alg, Max: 20, Expiration: time.Minute, Redis: client, Name: "nethttp",
					FailurePolicy: quota.FailClosed, StorageTimeout: 10 * time.Second,
					KeyGenerator: func(*http.Request) string { return "exact-" + alg.String() },
				})(http.HandlerFunc(ok)))
			}
			assert.Equal(t, int64(20), hammer(t, replicas, 200, 16))
		})
	}
}

// hammer sends requests requests from callers goroutines, spread over
// replicas in turn, and returns how many were admitted; a status other
// than 200 or 429 fails the test.
func hammer(t *testing.T, replicas []http.Handler, requests, callers int64) int64 {
	t.Helper()
	var admitted, next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for i := next.Add(1); i <= requests; i = next.Add(1) {
				switch code := from(replicas[i%int64(len(replicas))], "192.0.2.1:"+strconv.Itoa(int(i))).StatusCode; code {
				case 200:
					admitted.Add(1)
				case 429:
				default:
					t.Errorf("status %d", code)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}
