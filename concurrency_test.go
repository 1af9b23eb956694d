package limiter

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// slotApps returns n replicas of a Concurrency limiter of cfg in front of
// handler, each with a Redis client of its own (one in memory when server
// is nil).
func slotApps(t *testing.T, server *redistest.Server, n int, cfg Config, handler fiber.Handler) []fasthttp.RequestHandler {
	t.Helper()
	if server == nil {
		n = 1
	}
	var apps []fasthttp.RequestHandler
	for range n {
		c := cfg
		c.LimiterMiddleware, c.KeyGenerator = Concurrency{}, headerKey
		if server != nil {
			storage := redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr()}))
			t.Cleanup(func() { _ = storage.Close() })
			c.Storage, c.StorageTimeout, c.FailurePolicy = storage, 10*time.Second, FailClosed
		}
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(New(c))
		app.Get("/*", handler)
		apps = append(apps, app.Handler())
	}
	return apps
}

// inFlight counts the requests a handler runs at once, and the most.
type inFlight struct{ now, most atomic.Int64 }

func (f *inFlight) enter() {
	n := f.now.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
}

func (f *inFlight) leave() { f.now.Add(-1) }

// Concurrency Max 3: 10 requests at once with a 400 ms handler, on three
// replicas of one Redis (and in memory), admit exactly 3, and never more
// than 3 run at once; the rest get 429 with the slots' headers.
func TestConcurrencyAdmitsMaxInFlight(t *testing.T) {
	server := redistest.Start(t)
	for _, where := range []struct {
		name   string
		server *redistest.Server
	}{{"memory", nil}, {"redis", server}} {
		t.Run(where.name, func(t *testing.T) {
			var running inFlight
			release := make(chan struct{})
			var decided sync.WaitGroup
			decided.Add(10)
			cfg := Config{Max: 3, Expiration: time.Minute, Name: "flight", OnDecision: func(*fiber.Ctx, DecisionEvent) { decided.Done() }}
			apps := slotApps(t, where.server, 3, cfg, func(c *fiber.Ctx) error {
				running.enter()
				defer running.leave()
				<-release // held until every request is decided
				time.Sleep(400 * time.Millisecond)
				return c.SendStatus(fiber.StatusOK)
			})
			var ok, rejected atomic.Int64
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Go(func() {
					var ctx fasthttp.RequestCtx
					ctx.Request.SetRequestURI("/")
					ctx.Request.Header.Set("X-Key", "client")
					apps[i%len(apps)](&ctx)
					switch ctx.Response.StatusCode() {
					case fiber.StatusOK:
						ok.Add(1)
						assert.Equal(t, "3", string(ctx.Response.Header.Peek("X-RateLimit-Limit")))
					case fiber.StatusTooManyRequests:
						rejected.Add(1)
						assert.Equal(t, "0", string(ctx.Response.Header.Peek("X-RateLimit-Remaining")))
						assert.Equal(t, "1", string(ctx.Response.Header.Peek("Retry-After")))
					default:
						t.Errorf("status %d", ctx.Response.StatusCode())
					}
				})
			}
			decided.Wait()
			close(release)
			wg.Wait()
			assert.Equal(t, int64(3), ok.Load())
			assert.Equal(t, int64(7), rejected.Load())
			assert.LessOrEqual(t, running.most.Load(), int64(3))
		})
	}
}

// A handler that returns an error, or panics, gives its slot back: the
// next request of the key runs.
func TestConcurrencyFreesSlotsOfFailedHandlers(t *testing.T) {
	server := redistest.Start(t)
	for _, where := range []struct {
		name   string
		server *redistest.Server
	}{{"memory", nil}, {"redis", server}} {
		t.Run(where.name, func(t *testing.T) {
			var mode atomic.Int64
			cfg := Config{Max: 1, Expiration: time.Hour, Name: "failing"}
			cfg.LimiterMiddleware, cfg.KeyGenerator = Concurrency{}, headerKey
			if where.server != nil {
				cfg.Storage = redis.New(where.server.Client(t))
			}
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Use(func(c *fiber.Ctx) (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fiber.NewError(fiber.StatusInternalServerError, "recovered")
					}
				}()
				return c.Next()
			})
			app.Use(New(cfg))
			app.Get("/*", func(c *fiber.Ctx) error {
				switch mode.Load() {
				case 1:
					return errors.New("failed")
				case 2:
					panic("handler panics")
				}
				return c.SendStatus(fiber.StatusOK)
			})
			for _, m := range []int64{1, 2, 1, 2, 0} {
				mode.Store(m)
				resp := get(t, app, "/", "k")
				want := fiber.StatusInternalServerError
				if m == 0 {
					want = fiber.StatusOK
				}
				require.Equal(t, want, resp.StatusCode, "mode %d: the slot came back after the last request", m)
			}
		})
	}
}

// A replica that dies holding slots frees them after Expiration: another
// replica rejects the key until then, and admits it after.
func TestConcurrencyDeadReplicaSlotsComeBack(t *testing.T) {
	server := redistest.Start(t)
	const expiration = 1500 * time.Millisecond
	dead, err := quota.NewConcurrency(quota.ConcurrencyConfig{Max: 2, Expiration: expiration, Name: "dead", Redis: server.Client(t)})
	require.NoError(t, err)
	start := time.Now()
	for range 2 {
		s, err := dead.Acquire(context.Background(), "k")
		require.NoError(t, err)
		require.True(t, s.Allowed()) // never released: its process is gone
	}
	apps := slotApps(t, server, 1, Config{Max: 2, Expiration: expiration, Name: "dead"}, func(c *fiber.Ctx) error {
		return c.SendStatus(fiber.StatusOK)
	})
	for {
		code, _ := serveKeyed(apps[0], "k")
		if code == fiber.StatusOK {
			break
		}
		require.Equal(t, fiber.StatusTooManyRequests, code)
		require.Less(t, time.Since(start), 30*time.Second, "the dead replica's slots never came back")
		time.Sleep(50 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, time.Since(start), expiration, "no slot comes back before its Expiration")
}

// With MaxDelay, requests wait for a slot instead of 429: Max 1, five
// at once on two replicas with a 200 ms handler all run, one at a time.
func TestConcurrencyWaitsForASlot(t *testing.T) {
	server := redistest.Start(t)
	var running inFlight
	apps := slotApps(t, server, 2, Config{Max: 1, Expiration: time.Minute, MaxDelay: 10 * time.Second, Name: "wait"}, func(c *fiber.Ctx) error {
		running.enter()
		defer running.leave()
		time.Sleep(200 * time.Millisecond)
		return c.SendStatus(fiber.StatusOK)
	})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range 5 {
		wg.Go(func() {
			if code, _ := serveKeyed(apps[i%2], "k"); code == fiber.StatusOK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(5), ok.Load())
	assert.Equal(t, int64(1), running.most.Load())
}

// What has no sense for slots panics at New, naming the field.
func TestConcurrencyPanicsWithWhatItCannotHold(t *testing.T) {
	for name, cfg := range map[string]Config{
		"SkipFailedRequests":     {SkipFailedRequests: true},
		"SkipSuccessfulRequests": {SkipSuccessfulRequests: true},
		"MaxFunc":                {MaxFunc: func(*fiber.Ctx) int { return 2 }},
		"Cost":                   {Cost: func(*fiber.Ctx) int { return 2 }},
		"IdempotencyKey":         {IdempotencyKey: func(*fiber.Ctx) string { return "" }},
		"Lease":                  {Lease: time.Second},
		"BlockFor":               {BlockFor: time.Second},
		"Storage":                {Storage: newMapStorage()},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				p := recover()
				require.NotNil(t, p, "New must panic")
				assert.Contains(t, p, name)
			}()
			cfg.LimiterMiddleware = Concurrency{}
			New(cfg)
		})
	}
}

// Distinct keys hold distinct slots.
func TestConcurrencyKeysApart(t *testing.T) {
	release := make(chan struct{})
	apps := slotApps(t, nil, 1, Config{Max: 1, Expiration: time.Minute}, func(c *fiber.Ctx) error {
		<-release
		return c.SendStatus(fiber.StatusOK)
	})
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range 3 {
		wg.Go(func() { codes[i], _ = serveKeyed(apps[0], "key"+strconv.Itoa(i)) })
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, []int{200, 200, 200}, codes)
}

// A hook that panics after the slot was taken gives the slot back: the
// next request of the key runs.
func TestConcurrencyFreesTheSlotOfAPanickingHook(t *testing.T) {
	var panics atomic.Bool
	panics.Store(true)
	cfg := Config{Max: 1, Expiration: time.Hour, LimiterMiddleware: Concurrency{}, KeyGenerator: headerKey,
		OnDecision: func(*fiber.Ctx, DecisionEvent) {
			if panics.Load() {
				panic("hook panics")
			}
		}}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) (err error) {
		defer func() {
			if recover() != nil {
				err = fiber.ErrInternalServerError
			}
		}()
		return c.Next()
	})
	app.Use(New(cfg))
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	require.Equal(t, fiber.StatusInternalServerError, get(t, app, "/", "k").StatusCode)
	panics.Store(false)
	assert.Equal(t, fiber.StatusOK, get(t, app, "/", "k").StatusCode, "the slot came back")
}

// Under DryRun nothing waits: a request over the limit goes on at once,
// with MaxDelay as with Concurrency{}.
func TestDryRunHoldsNothingBack(t *testing.T) {
	for name, cfg := range map[string]Config{
		"MaxDelay":    {Max: 1, Expiration: 30 * time.Second, MaxDelay: 40 * time.Second},
		"Concurrency": {Max: 1, Expiration: time.Minute, MaxDelay: 30 * time.Second, LimiterMiddleware: Concurrency{}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.DryRun, cfg.KeyGenerator = true, headerKey
			release := make(chan struct{})
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Use(New(cfg))
			app.Get("/hold", func(c *fiber.Ctx) error {
				<-release
				return c.SendStatus(fiber.StatusOK)
			})
			app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
			var wg sync.WaitGroup
			wg.Go(func() { get(t, app, "/hold", "k") }) // holds the slot (or spends the window)
			time.Sleep(50 * time.Millisecond)
			done := make(chan int, 1)
			go func() { done <- get(t, app, "/", "k").StatusCode }()
			select {
			case code := <-done:
				assert.Equal(t, fiber.StatusOK, code)
			case <-time.After(5 * time.Second): // it would wait 30 s, or until release
				t.Error("a dry run held a request back")
			}
			close(release)
			wg.Wait()
		})
	}
}

// Two Concurrency limiters of one app on one Redis keep their slots
// apart by Name: without one, New panics rather than let two routes'
// caps count as one; with their own Names each has its own slots, and
// with the same Name they share them, as asked.
func TestConcurrencyLimitersOnOneRedisKeepApart(t *testing.T) {
	server := redistest.Start(t)
	store := redis.New(server.Client(t))
	cfg := Config{Max: 1, Expiration: time.Minute, Storage: store, LimiterMiddleware: Concurrency{}, KeyGenerator: headerKey}
	first := New(cfg)
	defer runtime.KeepAlive(first)
	func() {
		defer func() {
			p := recover()
			require.NotNil(t, p, "a second Concurrency on the Redis without a Name")
			assert.Contains(t, p, "Name")
		}()
		New(cfg)
	}()
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	holding := func(name string) fasthttp.RequestHandler {
		c := cfg
		c.Name = name
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(New(c))
		app.Get("/hold", func(c *fiber.Ctx) error {
			entered <- struct{}{}
			<-release
			return c.SendStatus(fiber.StatusOK)
		})
		app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		return app.Handler()
	}
	a, b, shared := holding("a"), holding("b"), holding("a")
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI("/hold")
		ctx.Request.Header.Set("X-Key", "k")
		a(&ctx)
	}()
	<-entered // a holds k's one slot
	code, _ := serveKeyed(shared, "k")
	assert.Equal(t, fiber.StatusTooManyRequests, code, "the same Name shares a's slot")
	code, _ = serveKeyed(b, "k")
	assert.Equal(t, fiber.StatusOK, code, "another Name has slots of its own")
	close(release)
	<-done
}
