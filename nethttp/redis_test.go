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
			var admitted, next atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1); i <= 200; i = next.Add(1) {
						switch code := from(replicas[i%3], "192.0.2.1:"+strconv.Itoa(int(i))).StatusCode; code {
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
			assert.Equal(t, int64(20), admitted.Load())
		})
	}
}
