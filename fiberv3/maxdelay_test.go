package limiter

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Fiber v3 waits for turns as Fiber v2 does: three replicas of one Redis,
// a fixed window of 5 a second and MaxDelay 1.5 s: 12 requests at once
// give 5 now, 5 when the next window opens (no sooner than 1 s), 2 429s.
func TestMaxDelayWaitsForTheTurnAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	now := time.Now().UnixMilli()
	var replicas []fasthttp.RequestHandler
	for range 3 {
		storage := redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr()}))
		t.Cleanup(func() { _ = storage.Close() })
		cfg := Config{Max: 5, Expiration: time.Second, MaxDelay: 1500 * time.Millisecond, Storage: storage, Name: "turns",
			StorageTimeout: 10 * time.Second, FailurePolicy: FailClosed}
		cfg.clock = func() int64 { return now } // every request "at once"
		replicas = append(replicas, replica(cfg))
	}
	start := time.Now()
	var mu sync.Mutex
	var served []time.Duration
	rejected := 0
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			code, _ := serve(replicas[i%3], "k")
			mu.Lock()
			defer mu.Unlock()
			switch code {
			case fiber.StatusOK:
				served = append(served, time.Since(start))
			case fiber.StatusTooManyRequests:
				rejected++
			default:
				t.Errorf("status %d", code)
			}
		})
	}
	wg.Wait()
	slices.Sort(served)
	require.Len(t, served, 10)
	assert.Equal(t, 2, rejected)
	for _, at := range served[5:] {
		assert.GreaterOrEqual(t, at, time.Second, "served at the next window")
	}
}
