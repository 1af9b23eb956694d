package limiter

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/storage/redis/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Three replicas sharing a Redis, each sent every retry of 4 requests at
// once (their Idempotency-Key): each request counts once, every retry gets
// its request's status and headers, and every algorithm holds the limit.
func TestIdempotentRetriesAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var replicas []fasthttp.RequestHandler
			for range 3 {
				replicas = append(replicas, replicaHandler(strict(Config{
					Max: 3, Expiration: time.Minute, LimiterMiddleware: alg.mw, Name: "once-" + alg.name,
					Storage:        redis.New(redis.Config{Host: "127.0.0.1", Port: server.Port}),
					IdempotencyKey: IdempotencyKeyHeader,
				})))
			}
			type answer struct {
				status    int
				remaining string
			}
			answers := make([][]answer, 4)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 36 {
				wg.Go(func() {
					var ctx fasthttp.RequestCtx
					ctx.Request.Header.SetMethod(fasthttp.MethodGet)
					ctx.Request.SetRequestURI("/")
					ctx.Request.Header.Set("X-Key", "client")
					ctx.Request.Header.Set("Idempotency-Key", "order-"+strconv.Itoa(i%4))
					replicas[i%3](&ctx)
					mu.Lock()
					defer mu.Unlock()
					answers[i%4] = append(answers[i%4], answer{ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("X-Ratelimit-Remaining"))})
				})
			}
			wg.Wait()
			admitted := 0
			for r, got := range answers {
				require.Len(t, got, 9)
				for _, a := range got[1:] {
					assert.Equal(t, got[0], a, "request %d: every retry gets its decision", r)
				}
				if got[0].status == fiber.StatusOK {
					admitted++
				}
			}
			assert.Equal(t, 3, admitted, "3 of the 4 requests admitted, each once")
		})
	}
}
