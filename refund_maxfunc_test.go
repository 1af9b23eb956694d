package limiter

import (
	"strconv"
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

// A refund gives back what its request took and nothing more, whatever the
// refunded request's MaxFunc said: a request of plan 400 is admitted and
// held in its handler, requests of plan 1000 spend the key meanwhile, and
// when the held one is given back, exactly one more of plan 1000 fits.
// Three replicas, in memory (one replica: memory is per process), on Redis
// and on a Storage of get and set; both Skip*Requests; every algorithm
// that takes a MaxFunc.
func TestRefundUnderAnotherMaxFunc(t *testing.T) {
	server := redistest.Start(t)
	backends := []struct {
		name     string
		replicas int
		storage  func() fiber.Storage
	}{
		{"memory", 1, func() fiber.Storage { return nil }},
		{"redis", 3, func() fiber.Storage {
			return redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr()}))
		}},
		{"storage", 3, nil}, // one map storage, shared
	}
	modes := []struct {
		name          string
		skipFailed    bool
		held, counted string // paths: the held request's, and the others'
	}{
		{"SkipFailedRequests", true, "/fail", "/"},
		{"SkipSuccessfulRequests", false, "/", "/fail"},
	}
	const plan = 1000
	for _, b := range backends {
		for _, m := range modes {
			for _, alg := range algorithms[:3] { // SlidingLog refuses MaxFunc at New
				t.Run(b.name+"/"+m.name+"/"+alg.name, func(t *testing.T) {
					shared := newMapStorage()
					// A clock that stands still: the token bucket refills
					// nothing meanwhile, and its 500 s window in ms divides
					// by both plans, so that its refund is exact to the unit.
					var clock testClock
					clock.now.Store(1_800_000_000_000)
					key := t.Name()
					entered, release := make(chan struct{}), make(chan struct{})
					var replicas []fasthttp.RequestHandler
					for range b.replicas {
						cfg := strict(Config{
							Name: "refund-" + b.name, Expiration: 500 * time.Second, LimiterMiddleware: alg.mw,
							KeyGenerator: headerKey,
							MaxFunc: func(c *fiber.Ctx) int {
								n, _ := strconv.Atoi(c.Get("X-Plan"))
								return n
							},
							SkipFailedRequests: m.skipFailed, SkipSuccessfulRequests: !m.skipFailed,
						})
						cfg.clock = clock.millis
						if b.storage == nil {
							cfg.Storage = shared
						} else if s := b.storage(); s != nil {
							t.Cleanup(func() { _ = s.Close() })
							cfg.Storage = s
						}
						app := fiber.New(fiber.Config{DisableStartupMessage: true})
						app.Use(New(cfg))
						app.Get("/*", func(c *fiber.Ctx) error {
							if c.Get("X-Hold") != "" {
								entered <- struct{}{}
								<-release
							}
							if c.Path() == "/fail" {
								return c.SendStatus(fiber.StatusInternalServerError)
							}
							return c.SendStatus(fiber.StatusOK)
						})
						replicas = append(replicas, app.Handler())
					}
					send := func(i int, path, plan string, hold bool) (int, string) {
						var ctx fasthttp.RequestCtx
						ctx.Request.Header.SetMethod(fasthttp.MethodGet)
						ctx.Request.SetRequestURI(path)
						ctx.Request.Header.Set("X-Key", key)
						ctx.Request.Header.Set("X-Plan", plan)
						if hold {
							ctx.Request.Header.Set("X-Hold", "1")
						}
						replicas[i%len(replicas)](&ctx)
						return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("X-Ratelimit-Remaining"))
					}
					spend := func() int {
						admitted := 0
						for i := range plan {
							if code, _ := send(i, m.counted, strconv.Itoa(plan), false); code != fiber.StatusTooManyRequests {
								admitted++
							}
						}
						return admitted
					}

					heldRemaining := make(chan string, 1)
					go func() {
						_, remaining := send(0, m.held, "400", true)
						heldRemaining <- remaining
					}()
					select {
					case <-entered:
					case <-heldRemaining:
						require.Fail(t, "the held request was not admitted")
					}
					require.Equal(t, plan-1, spend(), "the held request takes one unit")
					close(release)
					remaining := <-heldRemaining
					assert.Equal(t, 1, spend(), "the refund gives back its one unit, no more")
					assert.Equal(t, "0", remaining, "under its own plan of 400, the key is spent after the refund too")
				})
			}
		}
	}
}
