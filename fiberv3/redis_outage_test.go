package limiter

// A real Redis killed, restarted or paused under Fiber v3 replicas.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v3"
	fiberredis "github.com/gofiber/storage/redis/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// load sends requests to the replicas from 8 goroutines until stop is
// closed, counting responses by status.
type load struct {
	ok, limited, other atomic.Int64
	wg                 sync.WaitGroup
	stop               chan struct{}
}

func startLoad(replicas []fasthttp.RequestHandler) *load {
	l := &load{stop: make(chan struct{})}
	for g := range 8 {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				switch code, _ := serve(replicas[(g+i)%len(replicas)], "client-"+strconv.Itoa(i%50)); code {
				case fiber.StatusOK:
					l.ok.Add(1)
				case fiber.StatusTooManyRequests:
					l.limited.Add(1)
				default:
					l.other.Add(1)
				}
			}
		})
	}
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// Under the default policy, three Fiber v3 replicas on one Redis answer
// every request with 200 or 429 while Redis is killed and restarted, and
// while it holds every client (CLIENT PAUSE); afterwards they decide in
// Redis again.
func TestRedisOutages(t *testing.T) {
	server := redistest.Start(t)
	var fromRedis atomic.Int64
	var replicas []fasthttp.RequestHandler
	for range 3 {
		storage := fiberredis.New(fiberredis.Config{Addrs: []string{server.Addr()}, PoolSize: 8})
		t.Cleanup(func() { _ = storage.Close() })
		replicas = append(replicas, replica(Config{
			Max: 1000, Expiration: time.Minute, Storage: storage, Name: "faults",
			OnDecision: func(_ fiber.Ctx, e DecisionEvent) {
				if e.Source == SourceBackend {
					fromRedis.Add(1)
				}
			},
			OnStorageError: func(error) {},
		}))
	}
	backInRedis := func(t *testing.T) {
		t.Helper()
		since := fromRedis.Load()
		require.Eventually(t, func() bool {
			for _, r := range replicas {
				serve(r, "probe")
			}
			return fromRedis.Load() > since
		}, 20*time.Second, 20*time.Millisecond, "decided in Redis again")
	}

	t.Run("killed", func(t *testing.T) {
		l := startLoad(replicas)
		time.Sleep(200 * time.Millisecond)
		server.Stop()
		time.Sleep(time.Second)
		server.Restart()
		time.Sleep(200 * time.Millisecond)
		l.end()
		assert.Zero(t, l.other.Load(), "responses other than 200 and 429")
		assert.Positive(t, l.ok.Load())
		backInRedis(t)
	})
	t.Run("paused", func(t *testing.T) {
		admin := server.Client(t)
		l := startLoad(replicas)
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", "1000", "ALL").Err())
		time.Sleep(1200 * time.Millisecond)
		l.end()
		assert.Zero(t, l.other.Load(), "responses other than 200 and 429")
		assert.Positive(t, l.ok.Load())
		backInRedis(t)
	})
}
