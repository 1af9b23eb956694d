package limiter

// Helpers shared by this package's tests: replicas keyed by X-Key, requests to them, the algorithms.

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
)

// replica builds one Fiber v3 app around cfg, keyed by X-Key, and returns
// its handler.
func replica(cfg Config) fasthttp.RequestHandler {
	cfg.KeyGenerator = func(c fiber.Ctx) string { return c.Get("X-Key") }
	app := fiber.New()
	app.Use(New(cfg))
	app.Get("/*", func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// serve sends GET / with X-Key key to h and returns the status and the
// X-RateLimit-Remaining header.
func serve(h fasthttp.RequestHandler, key string) (int, string) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	h(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("X-RateLimit-Remaining"))
}

// hammer sends requests for key spread over the replicas from callers
// goroutines and returns how many were admitted; any status but 200 and
// 429 fails the test.
func hammer(t *testing.T, replicas []fasthttp.RequestHandler, key string, requests, callers int) int {
	t.Helper()
	var next, admitted atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					return
				}
				switch code, _ := serve(replicas[i%int64(len(replicas))], key); code {
				case fiber.StatusOK:
					admitted.Add(1)
				case fiber.StatusTooManyRequests:
				default:
					t.Errorf("status %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	return int(admitted.Load())
}

// algorithms are this package's Handlers, by name.
var algorithms = []struct {
	name string
	mw   Handler
}{{"FixedWindow", FixedWindow{}}, {"SlidingWindow", SlidingWindow{}}, {"TokenBucket", TokenBucket{}}, {"SlidingLog", SlidingLog{}}}

// strict makes a Storage failure a 503 that hammer reports, with a
// timeout long enough for a loaded machine under the race detector, so
// that no request is decided by the per-replica fallback.
func strict(cfg Config) Config {
	cfg.FailurePolicy = FailClosed
	cfg.StorageTimeout = 10 * time.Second
	return cfg
}
