package limiter

// Replicas sharing one Storage (Redis, in most tests): building them, hammering a key across them.

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// policyAnswered is the response header that a replica sets when the
// failure policy answered a request instead of its Storage (the call
// failed, or the breaker was open): DecisionEvent.Fallback.
const policyAnswered = "X-Test-Policy-Answered"

// replicaHandler builds one Fiber app ("replica") around cfg and returns its
// handler. Requests are keyed by X-Key. Replicas in one process share their
// state by asking for it with one Name ("replica" unless cfg has one), as
// separate processes would by running the same code. A response that the
// failure policy answered carries policyAnswered.
func replicaHandler(cfg Config) fasthttp.RequestHandler {
	cfg.KeyGenerator = headerKey
	if cfg.Name == "" {
		cfg.Name = "replica"
	}
	observe := cfg.OnDecision
	cfg.OnDecision = func(c *fiber.Ctx, e DecisionEvent) {
		if e.Fallback() {
			c.Set(policyAnswered, "1")
		}
		if observe != nil {
			observe(c, e)
		}
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(cfg))
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// strict makes cfg's Storage failures visible instead of handled: FailClosed
// answers 503, which hammer reports, and the timeout is long enough for a
// loaded machine under the race detector. A test of exactness would
// otherwise pass a slow call to the per-replica fallback, which is right
// in production and wrong for what such a test shows.
func strict(cfg Config) Config {
	cfg.FailurePolicy = FailClosed
	cfg.StorageTimeout = 10 * time.Second
	return cfg
}

// serveKeyed serves GET / with X-Key key on replica, and returns the
// response's status and body.
func serveKeyed(replica fasthttp.RequestHandler, key string) (int, []byte) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	replica(&ctx)
	return ctx.Response.StatusCode(), ctx.Response.Body()
}

// hammer sends requests for key spread over the replicas from callers
// goroutines and returns how many were admitted. Any status but 200 and 429
// fails the test.
func hammer(t *testing.T, replicas []fasthttp.RequestHandler, key string, requests, callers int) int {
	t.Helper()
	admitted, _ := hammerCounted(t, replicas, key, requests, callers, false)
	return admitted
}

// hammerCounted is hammer, which also returns how many requests the
// failure policy answered (policyAnswered); with policy503 it accepts
// FailClosed's 503 for those.
func hammerCounted(t *testing.T, replicas []fasthttp.RequestHandler, key string, requests, callers int, policy503 bool) (admitted, byPolicy int) {
	t.Helper()
	var next, ok, policy atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					return
				}
				var ctx fasthttp.RequestCtx
				ctx.Request.Header.SetMethod(fasthttp.MethodGet)
				ctx.Request.SetRequestURI("/")
				ctx.Request.Header.Set("X-Key", key)
				replicas[i%int64(len(replicas))](&ctx)
				answered := len(ctx.Response.Header.Peek(policyAnswered)) > 0
				if answered {
					policy.Add(1)
				}
				switch code := ctx.Response.StatusCode(); {
				case code == fiber.StatusOK:
					ok.Add(1)
				case code == fiber.StatusTooManyRequests:
				case code == fiber.StatusServiceUnavailable && answered && policy503:
				default:
					t.Errorf("status %d: %s", code, ctx.Response.Body())
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(ok.Load()), int(policy.Load())
}

// storedKeys returns the keys of client that match pattern, less the
// breaker's probe key: New's probe writes it for a ms, and a fast machine
// lists it before Redis drops it.
func storedKeys(t *testing.T, client goredis.UniversalClient, pattern string) []string {
	t.Helper()
	keys, err := client.Keys(context.Background(), pattern).Result()
	require.NoError(t, err)
	return slices.DeleteFunc(keys, func(k string) bool { return strings.HasSuffix(k, "{probe}") })
}
