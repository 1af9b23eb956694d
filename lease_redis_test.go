package limiter

import (
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Three replicas with leases share one Redis: never more than Max of
// 5000 concurrent requests admitted, nearly all of it, for every
// algorithm that leases, with one script call for many requests.
func TestRedisLeasesAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	const requests, callers, max = 5000, 48, 1000
	for _, alg := range algorithms {
		if alg.name == "SlidingLog" {
			continue
		}
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				storage := redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 16}))
				t.Cleanup(func() { _ = storage.Close() })
				replicas = append(replicas, replicaHandler(strict(Config{
					Max: max, Expiration: 1000 * time.Hour, Storage: storage, LimiterMiddleware: alg.mw,
					Lease: 500 * time.Millisecond,
				})))
			}
			calls0, _ := redistest.CommandStats(t, admin)
			admitted := hammer(t, replicas, "leased-"+alg.name, requests, callers)
			calls1, _ := redistest.CommandStats(t, admin)
			scripts := calls1["evalsha"] + calls1["eval"] - calls0["evalsha"] - calls0["eval"]
			t.Logf("%s: %d admitted of %d, %d script calls", alg.name, admitted, requests, scripts)
			assert.LessOrEqual(t, admitted, max)
			assert.GreaterOrEqual(t, admitted, max*95/100)
			assert.LessOrEqual(t, scripts*10, requests, "script calls per request")
		})
	}
}

// Lease with what a share cannot hold panics at New, naming the fields.
func TestLeasePanicsWithWhatItCannotHold(t *testing.T) {
	for name, cfg := range map[string]Config{
		"MaxFunc":         {Lease: time.Second, MaxFunc: func(*fiber.Ctx) int { return 5 }},
		"BlockFor":        {Lease: time.Second, BlockFor: time.Minute},
		"SlidingLog":      {Lease: time.Second, LimiterMiddleware: SlidingLog{}},
		"TokenBucketSkip": {Lease: time.Second, LimiterMiddleware: TokenBucket{}, SkipFailedRequests: true},
		"negative":        {Lease: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				p := recover()
				require.NotNil(t, p, "New panics")
				assert.Contains(t, p, "Lease")
			}()
			New(cfg)
		})
	}
}
