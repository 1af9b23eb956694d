package limiter

import (
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

// Three Fiber v3 replicas, each with its own gofiber/storage/redis/v3
// client, share one Redis: exactly Max of 300 concurrent requests are
// admitted, for each algorithm.
func TestExactAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := fiberredis.New(fiberredis.Config{Addrs: []string{server.Addr()}, PoolSize: 16})
				t.Cleanup(func() { _ = storage.Close() })
				replicas = append(replicas, replica(strict(Config{
					Max: 25, Expiration: time.Minute, Storage: storage, LimiterMiddleware: alg.mw, Name: "v3",
				})))
			}
			assert.Equal(t, 25, hammer(t, replicas, "exact-"+alg.name, 300, 24))
		})
	}
}

// The same on a Redis Cluster of 3 masters, with a cluster client per
// replica, over keys that spread over every master.
func TestExactOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := fiberredis.New(fiberredis.Config{Addrs: cluster.Addrs(), IsClusterMode: true, PoolSize: 16})
				t.Cleanup(func() { _ = storage.Close() })
				replicas = append(replicas, replica(strict(Config{
					Max: 7, Expiration: time.Minute, Storage: storage, LimiterMiddleware: alg.mw, Name: "v3",
				})))
			}
			for i := range 12 {
				key := alg.name + "-" + strconv.Itoa(i)
				assert.Equal(t, 7, hammer(t, replicas, key, 40, 12), key)
			}
		})
	}
}

// This module's storage/redis Store is a Fiber v3 Storage too: three
// replicas, each with its own Store, admit exactly Max between them.
func TestExactAcrossReplicasOnStore(t *testing.T) {
	server := redistest.Start(t)
	var replicas []fasthttp.RequestHandler
	for range 3 {
		store := redis.New(server.Client(t))
		replicas = append(replicas, replica(strict(Config{Max: 25, Expiration: time.Minute, Storage: store, Name: "v3store"})))
	}
	assert.Equal(t, 25, hammer(t, replicas, "exact-store", 300, 24))
}
