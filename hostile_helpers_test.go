package limiter

import (
	"context"
	"strconv"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// hostileBackend is a backend for hostile tests: memory (1 replica), redis (3
// replicas, each its own client), storage (3 replicas, one map storage).
type hostileBackend struct {
	name     string
	replicas int
}

var hostileBackends = []hostileBackend{{"memory", 1}, {"redis", 3}, {"storage", 3}}

// holdGate lets a test hold requests with X-Hold: <n> in their handler
// until it releases them; X-Status sets the status the handler returns.
type holdGate struct {
	entered chan struct{}
	release chan struct{}
}

func newHoldGate() *holdGate {
	return &holdGate{entered: make(chan struct{}, 100000), release: make(chan struct{})}
}

// hostileReplicas builds n replicas of cfg on backend b (a fresh Redis client
// per replica on redis; one shared map storage on storage), each serving
// GET /* keyed by X-Key, with status X-Status (default 200), held at the
// gate when X-Hold is set.
func hostileReplicas(t *testing.T, b hostileBackend, srv *redistest.Server, shared fiber.Storage, gate *holdGate, cfgs ...Config) []fasthttp.RequestHandler {
	t.Helper()
	var hs []fasthttp.RequestHandler
	for i := range b.replicas {
		cfg := cfgs[i%len(cfgs)]
		if cfg.KeyGenerator == nil {
			cfg.KeyGenerator = headerKey
		}
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(New(b.storeIn(t, srv, shared, cfg)))
		app.Get("/*", func(c *fiber.Ctx) error {
			if c.Get("X-Hold") != "" && gate != nil {
				gate.entered <- struct{}{}
				<-gate.release
			}
			if s := c.Get("X-Status"); s != "" {
				n, _ := strconv.Atoi(s)
				return c.SendStatus(n)
			}
			return c.SendStatus(fiber.StatusOK)
		})
		hs = append(hs, app.Handler())
	}
	return hs
}

// storeIn returns cfg with b's Storage: a client of its own on srv for
// redis, shared for storage, none (memory) else.
func (b hostileBackend) storeIn(t *testing.T, srv *redistest.Server, shared fiber.Storage, cfg Config) Config {
	switch b.name {
	case "redis":
		s := redis.New(goredis.NewClient(&goredis.Options{Addr: srv.Addr()}))
		t.Cleanup(func() { _ = s.Close() })
		cfg.Storage = s
	case "storage":
		cfg.Storage = shared
	}
	return cfg
}

// hostileSend sends one request; headers are name, value pairs.
func hostileSend(h fasthttp.RequestHandler, key string, hdr ...string) (int, string) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		ctx.Request.Header.Set(hdr[i], hdr[i+1])
	}
	h(&ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Header.Peek("X-Ratelimit-Remaining"))
}

// keysWithoutTTL lists every key in srv's Redis that has no TTL (PTTL -1).
func keysWithoutTTL(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	var bad []string
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if d, err := c.PTTL(ctx, k).Result(); err == nil && d < 0 && d != -2*1e6 {
			if ttl, _ := c.Do(ctx, "PTTL", k).Int64(); ttl == -1 {
				bad = append(bad, strconv.Quote(k))
			}
		}
	}
	return bad
}

// flushRedis empties srv's Redis.
func flushRedis(t *testing.T, srv *redistest.Server) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer func() { _ = c.Close() }()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}
