package nethttp

import (
	"net/http"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// Three servers with leases share one Redis: never more than Max of 2000
// concurrent requests admitted, and nearly all of it.
func TestLeasesAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindow, quota.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			var replicas []http.Handler
			for range 3 {
				client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 16})
				t.Cleanup(func() { _ = client.Close() })
				replicas = append(replicas, New(Config{
					Algorithm: alg, Max: 400, Expiration: time.Hour, Redis: client, Name: "nethttp-lease",
					Lease: 500 * time.Millisecond, FailurePolicy: quota.FailClosed, StorageTimeout: 10 * time.Second,
					KeyGenerator: func(*http.Request) string { return "leased-" + alg.String() },
				})(http.HandlerFunc(ok)))
			}
			admitted := hammer(t, replicas, 2000, 16)
			assert.LessOrEqual(t, admitted, int64(400))
			assert.GreaterOrEqual(t, admitted, int64(380))
		})
	}
}
