package limiter

import (
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v3"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/stretchr/testify/assert"
	"github.com/valyala/fasthttp"
)

// Three Fiber v3 replicas with leases share one Redis: never more than
// Max admitted, and nearly all of it, for every algorithm that leases.
func TestLeasesAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range algorithms {
		if alg.name == "SlidingLog" {
			continue
		}
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := fiberredis.New(fiberredis.Config{Addrs: []string{server.Addr()}, PoolSize: 16})
				t.Cleanup(func() { _ = storage.Close() })
				replicas = append(replicas, replica(strict(Config{
					Max: 400, Expiration: time.Hour, Storage: storage, LimiterMiddleware: alg.mw, Name: "v3lease",
					Lease: 500 * time.Millisecond,
				})))
			}
			admitted := hammer(t, replicas, "leased-"+alg.name, 2000, 24)
			assert.LessOrEqual(t, admitted, 400)
			assert.GreaterOrEqual(t, admitted, 380)
		})
	}
}

// Lease with ExpirationFunc panics at New, naming both.
func TestLeaseWithExpirationFuncPanics(t *testing.T) {
	assert.PanicsWithValue(t, "limiter: Lease is set with MaxFunc or ExpirationFunc; a share of a client's quota is taken under one limit: use fixed limits (Max, Expiration or Limits) with Lease", func() {
		New(Config{Lease: time.Second, ExpirationFunc: func(fiber.Ctx) time.Duration { return time.Minute }})
	})
}
