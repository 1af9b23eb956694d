package limiter

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Replicas of a Concurrency limiter on one Redis under requests that end
// every way one can: served after a random time, the handler returning
// an error or panicking, OnDecision panicking, rejected to a custom
// LimitReached after waiting (MaxDelay), skipped by Next. Never more than
// Max limited handlers run at once, and once all have ended Redis holds
// no slot.
func TestConcurrencyHostileRequestsNeverOverMaxAndLeaveNoSlot(t *testing.T) {
	server := redistest.Start(t)
	admin := server.Client(t)
	var running inFlight
	var served, limited atomic.Int64
	cfg := Config{Max: 2, Expiration: time.Minute, Name: "hostile", MaxDelay: 5 * time.Millisecond,
		Next: func(c *fiber.Ctx) bool { return c.Get("X-Skip") != "" },
		OnDecision: func(c *fiber.Ctx, _ DecisionEvent) {
			if c.Get("X-Hook-Panic") != "" {
				panic("hook")
			}
		},
		LimitReached: func(c *fiber.Ctx) error {
			limited.Add(1)
			return c.SendStatus(fiber.StatusTooManyRequests)
		},
	}
	apps := slotApps(t, server, 2, cfg, func(c *fiber.Ctx) error {
		if c.Get("X-Skip") != "" {
			return nil // not limited: not counted
		}
		running.enter()
		defer running.leave()
		served.Add(1)
		time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
		switch {
		case c.Get("X-Panic") != "":
			panic("handler")
		case c.Get("X-Fail") != "":
			return errors.New("failed")
		}
		return c.SendStatus(fiber.StatusTeapot)
	})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 12 {
				var ctx fasthttp.RequestCtx
				ctx.Request.SetRequestURI("/")
				ctx.Request.Header.Set("X-Key", "client")
				switch rand.N(5) {
				case 0:
					ctx.Request.Header.Set("X-Panic", "1")
				case 1:
					ctx.Request.Header.Set("X-Hook-Panic", "1")
				case 2:
					ctx.Request.Header.Set("X-Fail", "1")
				case 3:
					ctx.Request.Header.Set("X-Skip", "1")
				}
				func() {
					defer func() {
						if p := recover(); p != nil && p != "hook" && p != "handler" {
							t.Errorf("unexpected panic %v", p)
						}
					}()
					apps[i%len(apps)](&ctx)
				}()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, running.most.Load(), int64(cfg.Max), "limited handlers of the key at once")
	assert.Positive(t, served.Load())
	assert.Positive(t, limited.Load())
	keys, err := admin.Keys(context.Background(), "*slots*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		n, err := admin.ZCard(context.Background(), k).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "slots left in %q", k)
	}
}
