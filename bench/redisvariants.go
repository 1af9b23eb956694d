package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	fiberredis "github.com/gofiber/storage/redis/v3"
	goredis "github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// redisMax admits everything: 10^9 per minute (within ours' bounds, see
// README "Panics at New": Max < 2^32 and Max × 60,000 ms < 2^51).
const redisMax = 1_000_000_000

// Names of the Redis variants. Those without "[mw]" are bare calls; "[mw]"
// ones are Fiber middleware served through app.Handler().
const (
	rOursFixed        = "ours-fixed"
	rOursFixedUnpiped = "ours-fixed-unpipelined"
	rOursFixedUnbatch = "ours-fixed-unbatched"
	rOursSliding      = "ours-sliding"
	rOursToken        = "ours-token"
	rOursFixed100     = "ours-fixed, Max 100"
	rOursLog100       = "ours-log, Max 100"
	rOursLog          = "ours-log"
	rEngineFixed      = "ours-fixed [engine]"
	rEngineSliding    = "ours-sliding [engine]"
	rEngineToken      = "ours-token [engine]"
	rOursFixedLease   = "ours-fixed-lease"
	rOursSlidingLease = "ours-sliding-lease"
	rOursTokenLease   = "ours-token-lease"
	rRedisRate        = "redis_rate"
	rRedisRateAuto    = "redis_rate [autopipeline]"
	rUlule            = "ulule-redis"
	rMwOursFixed      = "ours-fixed [mw]"
	rMwOursUnpiped    = "ours-fixed-unpipelined [mw]"
	rMwOursCtx        = "ours-fixed-ctxtimeout [mw]"
	rMwOursSliding    = "ours-sliding [mw]"
	rMwOursToken      = "ours-token [mw]"
	rMwFiber          = "fiber-redis [mw]"
)

// redisSession is an opened Redis variant: caller gives each calling
// goroutine its own decide function, which makes one decision for the key
// of index i (the hot key at index redisKeys) and fails unless it was
// admitted; close releases the clients.
type redisSession struct {
	caller func() func(i int) error
	close  func()
}

// redisVariant is one way of deciding on Redis. open connects new clients
// with pool connections each.
type redisVariant struct {
	name string
	via  string
	open func(srv *redisServer, pool int) (*redisSession, error)
}

// oursStoreVariant is the Lua engine of this module's storage/redis Store
// called directly, as the limiter calls it.
func oursStoreVariant(name string, alg redisengine.Algorithm, keys []string, opts ...redis.Option) *redisVariant {
	return &redisVariant{name, "engine Take", func(srv *redisServer, pool int) (*redisSession, error) {
		store := redis.New(srv.client(pool), opts...)
		engine := redisengine.OfStore(store)
		rule := redisengine.Rule{Algorithm: alg, Max: redisMax, Expiration: time.Minute}
		ctx := context.Background()
		decide := func(i int) error {
			res, err := engine.Take(ctx, keys[i], rule, 1)
			if err == nil && !res.Allowed {
				err = errors.New("rejected")
			}
			return err
		}
		return &redisSession{func() func(int) error { return decide }, func() { _ = store.Close() }}, nil
	}}
}

// strictVariant is the Store's engine called directly under a limit that
// rejects: Max 100 per 10 ms, so that the hot key's state is always full
// (for the log, 100 entries read on every call and written on every
// admission, 600 bytes each way). Rejections are decisions too.
func strictVariant(name string, alg redisengine.Algorithm, keys []string) *redisVariant {
	return &redisVariant{name, "engine Take", func(srv *redisServer, pool int) (*redisSession, error) {
		store := redis.New(srv.client(pool))
		engine := redisengine.OfStore(store)
		rule := redisengine.Rule{Algorithm: alg, Max: 100, Expiration: 10 * time.Millisecond}
		ctx := context.Background()
		decide := func(i int) error {
			_, err := engine.Take(ctx, keys[i], rule, 1)
			return err
		}
		return &redisSession{func() func(int) error { return decide }, func() { _ = store.Close() }}, nil
	}}
}

// logVariant is the Store's engine called directly with SlidingLog under
// its largest limit (redisengine.MaxLogLimit a minute): over many keys it
// admits every take, as the other algorithms' rows do; on one hot key it
// rejects most, and rejections are decisions too.
func logVariant(name string, keys []string) *redisVariant {
	return &redisVariant{name, "engine Take", func(srv *redisServer, pool int) (*redisSession, error) {
		store := redis.New(srv.client(pool))
		engine := redisengine.OfStore(store)
		rule := redisengine.Rule{Algorithm: redisengine.SlidingLog, Max: redisengine.MaxLogLimit, Expiration: time.Minute}
		ctx := context.Background()
		decide := func(i int) error {
			_, err := engine.Take(ctx, keys[i], rule, 1)
			return err
		}
		return &redisSession{func() func(int) error { return decide }, func() { _ = store.Close() }}, nil
	}}
}

// benchLease is the Lease of the -lease rows: what a user would pick,
// long enough that a busy key needs a call or two a second, short enough
// that a replica's unused share comes back soon.
const benchLease = time.Second

// engineVariant is the engine, package quota, called directly: what the
// middleware does per request, without Fiber, with the middleware's
// failure layer (FailClosed, so a failure is an error, not a decision).
// With lease above 0 it is Config.Lease: a busy key's takes decided from
// a share of its quota.
func engineVariant(name string, alg quota.Algorithm, lease time.Duration, keys []string, o options) *redisVariant {
	via := "quota.Limiter.Take"
	if lease > 0 {
		via += ", Lease " + lease.String()
	}
	return &redisVariant{name, via, func(srv *redisServer, pool int) (*redisSession, error) {
		client := srv.client(pool)
		l, err := quota.New(quota.Config{
			Algorithm: alg, Limits: []quota.Limit{{Max: redisMax, Expiration: time.Minute}}, Redis: client, Name: "bench-engine",
			FailurePolicy: quota.FailClosed, StorageTimeout: o.storageTimeout, Lease: lease,
		})
		if err != nil {
			_ = client.Close()
			return nil, err
		}
		ctx := context.Background()
		decide := func(i int) error {
			res, err := l.Take(ctx, keys[i], 1)
			if err == nil && !res.Allowed() {
				err = fmt.Errorf("rejected (%v)", res.Source())
			}
			return err
		}
		done := func() {
			// The shares still out go back when their leases end, by the
			// Limiter's timer: on this client, before it is closed, as a
			// replica that keeps running would give them back.
			if lease > 0 {
				time.Sleep(lease + leaseReturnSlack)
			}
			_ = client.Close()
		}
		return &redisSession{func() func(int) error { return decide }, done}, nil
	}}
}

// leaseReturnSlack is how long after its lease's end a lease session
// waits for its shares' returns before it closes its client.
const leaseReturnSlack = 200 * time.Millisecond

// handlerSession serves mw in a Fiber app, each caller with its own
// request context, and calls done at close.
func handlerSession(mw fiber.Handler, keys [][]byte, done func()) *redisSession {
	h := newApp(mw)
	return &redisSession{
		caller: func() func(int) error {
			req := newRequest()
			return func(i int) error {
				if code := req.serve(h, keys[i]); code != fiber.StatusOK {
					return fmt.Errorf("status %d", code)
				}
				return nil
			}
		},
		close: done,
	}
}

// oursHandlerVariant is this limiter as Fiber middleware with
// Config{Storage: redis.New(client)} and algorithm alg. FailClosed turns a
// storage failure into a 503, counted as an error, instead of an
// in-memory decision that would pass for a Redis one.
func oursHandlerVariant(name string, alg limiter.LimiterHandler, keys [][]byte, o options, opts ...redis.Option) *redisVariant {
	return &redisVariant{name, "Fiber handler", func(srv *redisServer, pool int) (*redisSession, error) {
		store := redis.New(srv.client(pool), opts...)
		mw := limiter.New(oursRedisConfig(store, redisMax, time.Minute, alg, o))
		return handlerSession(mw, keys, func() { _ = store.Close() }), nil
	}}
}

// oursRedisConfig is the Config of ours on Redis in figures 3 to 5. Its
// Name is how replicas in this one process share their state, as
// processes running the same code would.
func oursRedisConfig(store *redis.Store, max int, window time.Duration, alg limiter.LimiterHandler, o options) limiter.Config {
	return limiter.Config{
		Name: "bench", Max: max, Expiration: window, KeyGenerator: headerKey, LimiterMiddleware: alg,
		Storage: store, FailurePolicy: limiter.FailClosed, StorageTimeout: o.storageTimeout,
	}
}

// newFiberRedis is gofiber/storage/redis/v3 on srv.
func newFiberRedis(srv *redisServer, pool int) *fiberredis.Storage {
	return fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.port, PoolSize: max(pool, 1)})
}

// redisVariants are the variants of figures 3 and 4, each with keys of its
// own: n distinct ones and a hot one.
func redisVariants(n int, o options) []*redisVariant {
	bk := func(prefix string) [][]byte { return byteKeys(prefix, n) }
	sk := func(prefix string) []string { return stringKeys(prefix, n) }
	rrKeys, rraKeys, ululeKeys := sk("rr:"), sk("rra:"), sk("ul:")
	fiberKeys, ctxKeys := bk("fb:"), bk("h:fwc:")
	return []*redisVariant{
		oursStoreVariant(rOursFixed, redisengine.FixedWindow, sk("s:fw:")),
		oursStoreVariant(rOursFixedUnpiped, redisengine.FixedWindow, sk("s:fwu:"), redis.WithoutPipelining()),
		oursStoreVariant(rOursFixedUnbatch, redisengine.FixedWindow, sk("s:fwb:"), redis.WithoutBatching()),
		oursStoreVariant(rOursSliding, redisengine.SlidingWindow, sk("s:sw:")),
		oursStoreVariant(rOursToken, redisengine.TokenBucket, sk("s:tb:")),
		strictVariant(rOursFixed100, redisengine.FixedWindow, sk("s:fw100:")),
		strictVariant(rOursLog100, redisengine.SlidingLog, sk("s:sl100:")),
		logVariant(rOursLog, sk("s:sl:")),
		engineVariant(rEngineFixed, quota.FixedWindow, 0, sk("e:fw:"), o),
		engineVariant(rEngineSliding, quota.SlidingWindow, 0, sk("e:sw:"), o),
		engineVariant(rEngineToken, quota.TokenBucket, 0, sk("e:tb:"), o),
		engineVariant(rOursFixedLease, quota.FixedWindow, benchLease, sk("e:fwl:"), o),
		engineVariant(rOursSlidingLease, quota.SlidingWindow, benchLease, sk("e:swl:"), o),
		engineVariant(rOursTokenLease, quota.TokenBucket, benchLease, sk("e:tbl:"), o),
		{rRedisRate, "Limiter.Allow", func(srv *redisServer, pool int) (*redisSession, error) {
			client := srv.client(pool)
			rl := redis_rate.NewLimiter(client)
			limit := redis_rate.PerMinute(redisMax)
			ctx := context.Background()
			decide := func(i int) error {
				res, err := rl.Allow(ctx, rrKeys[i], limit)
				if err == nil && res.Allowed < 1 {
					err = errors.New("rejected")
				}
				return err
			}
			return &redisSession{func() func(int) error { return decide }, func() { _ = client.Close() }}, nil
		}},
		{rRedisRateAuto, "Limiter.Allow", func(srv *redisServer, pool int) (*redisSession, error) {
			// go-redis's own batching (v9.22+, experimental): concurrent
			// commands share pipelines of up to 200.
			client := srv.client(pool)
			ap, err := client.AutoPipeline()
			if err != nil {
				_ = client.Close()
				return nil, err
			}
			rl := redis_rate.NewLimiter(ap)
			limit := redis_rate.PerMinute(redisMax)
			ctx := context.Background()
			decide := func(i int) error {
				res, err := rl.Allow(ctx, rraKeys[i], limit)
				if err == nil && res.Allowed < 1 {
					err = errors.New("rejected")
				}
				return err
			}
			return &redisSession{func() func(int) error { return decide }, func() { _ = ap.Close(); _ = client.Close() }}, nil
		}},
		{rUlule, "Limiter.Get", func(srv *redisServer, pool int) (*redisSession, error) {
			client := srv.client(pool)
			store, err := ululeredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: "ulule"})
			if err != nil {
				_ = client.Close()
				return nil, err
			}
			lim := ulule.New(store, ulule.Rate{Period: time.Minute, Limit: redisMax})
			ctx := context.Background()
			decide := func(i int) error {
				res, err := lim.Get(ctx, ululeKeys[i])
				if err == nil && res.Reached {
					err = errors.New("rejected")
				}
				return err
			}
			return &redisSession{func() func(int) error { return decide }, func() { _ = client.Close() }}, nil
		}},
		oursHandlerVariant(rMwOursFixed, limiter.FixedWindow{}, bk("h:fw:"), o),
		oursHandlerVariant(rMwOursUnpiped, limiter.FixedWindow{}, bk("h:fwu:"), o, redis.WithoutPipelining()),
		{rMwOursCtx, "Fiber handler", func(srv *redisServer, pool int) (*redisSession, error) {
			client := goredis.NewClient(&goredis.Options{Addr: srv.addr(), PoolSize: max(pool, 1), ContextTimeoutEnabled: true})
			store := redis.New(client)
			mw := limiter.New(oursRedisConfig(store, redisMax, time.Minute, limiter.FixedWindow{}, o))
			return handlerSession(mw, ctxKeys, func() { _ = store.Close() }), nil
		}},
		oursHandlerVariant(rMwOursSliding, limiter.SlidingWindow{}, bk("h:sw:"), o),
		oursHandlerVariant(rMwOursToken, limiter.TokenBucket{}, bk("h:tb:"), o),
		{rMwFiber, "Fiber handler", func(srv *redisServer, pool int) (*redisSession, error) {
			storage := newFiberRedis(srv, pool)
			mw := fiberlimiter.New(fiberlimiter.Config{Max: redisMax, Expiration: time.Minute, KeyGenerator: headerKey, Storage: storage})
			return handlerSession(mw, fiberKeys, func() { _ = storage.Close() }), nil
		}},
	}
}

// redisPairs are the comparisons of figures 3 and 4: like with like, a bare
// call with a bare call and middleware with middleware.
var redisPairs = [][2]string{
	{rOursFixed, rRedisRate},
	{rOursFixed, rRedisRateAuto},
	{rRedisRateAuto, rRedisRate},
	{rOursFixed, rUlule},
	{rOursFixedUnpiped, rRedisRate},
	{rOursFixedUnpiped, rUlule},
	{rOursToken, rRedisRate},
	{rOursLog100, rOursFixed100},
	{rOursFixed, rOursFixedUnpiped},
	{rOursFixed, rOursFixedUnbatch},
	{rMwOursFixed, rMwFiber},
	{rMwOursUnpiped, rMwFiber},
	{rMwOursCtx, rMwFiber},
	{rMwOursFixed, rMwOursCtx},
	{rEngineFixed, rOursFixed},
	{rEngineFixed, rMwOursFixed},
	{rOursFixedLease, rEngineFixed},
	{rOursSlidingLease, rEngineSliding},
	{rOursTokenLease, rEngineToken},
}
