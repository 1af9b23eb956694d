package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// replicaWindow is the window of figure 5: long enough that nothing comes
// back while it runs.
const replicaWindow = 1000 * time.Hour

// replicaTake makes one decision on one replica: whether it was admitted.
type replicaTake func(key string) (bool, error)

// replicaVariant is one limiter run as several replicas on one Redis.
// open starts one replica with its own client (pool connections) and
// returns a factory of takes, one per calling goroutine, and a close.
type replicaVariant struct {
	name string
	open func(srv *redisServer, pool int, o options) (newTake func() replicaTake, close func(), err error)
}

// handlerReplica serves mw; 200 is admitted, 429 rejected, anything else
// an error.
func handlerReplica(mw fiber.Handler) func() replicaTake {
	h := newApp(mw)
	return func() replicaTake {
		req := newRequest()
		return func(key string) (bool, error) {
			switch code := req.serve(h, []byte(key)); code {
			case fiber.StatusOK:
				return true, nil
			case fiber.StatusTooManyRequests:
				return false, nil
			default:
				return false, fmt.Errorf("status %d", code)
			}
		}
	}
}

// oursReplica is this limiter with algorithm alg on redis.New(client).
func oursReplica(name string, alg limiter.LimiterHandler) replicaVariant {
	return replicaVariant{name, func(srv *redisServer, pool int, o options) (func() replicaTake, func(), error) {
		store := redis.New(srv.client(pool))
		mw := limiter.New(oursRedisConfig(store, o.replicaLimit, replicaWindow, alg, o))
		return handlerReplica(mw), func() { _ = store.Close() }, nil
	}}
}

// fiberReplica is Fiber's limiter with algorithm alg on
// gofiber/storage/redis.
func fiberReplica(name string, alg fiberlimiter.LimiterHandler) replicaVariant {
	return replicaVariant{name, func(srv *redisServer, pool int, o options) (func() replicaTake, func(), error) {
		storage := newFiberRedis(srv, pool)
		mw := fiberlimiter.New(fiberlimiter.Config{Max: o.replicaLimit, Expiration: replicaWindow, KeyGenerator: headerKey, Storage: storage, LimiterMiddleware: alg})
		return handlerReplica(mw), func() { _ = storage.Close() }, nil
	}}
}

// replicaVariants are the variants of figure 5.
func replicaVariants() []replicaVariant {
	return []replicaVariant{
		oursReplica("ours-fixed [mw]", limiter.FixedWindow{}),
		oursReplica("ours-sliding [mw]", limiter.SlidingWindow{}),
		oursReplica("ours-token [mw]", limiter.TokenBucket{}),
		{rRedisRate, func(srv *redisServer, pool int, o options) (func() replicaTake, func(), error) {
			client := srv.client(pool)
			rl := redis_rate.NewLimiter(client)
			limit := redis_rate.Limit{Rate: o.replicaLimit, Burst: o.replicaLimit, Period: replicaWindow}
			take := func(key string) (bool, error) {
				res, err := rl.Allow(context.Background(), key, limit)
				return err == nil && res.Allowed > 0, err
			}
			return func() replicaTake { return take }, func() { _ = client.Close() }, nil
		}},
		{rUlule, func(srv *redisServer, pool int, o options) (func() replicaTake, func(), error) {
			client := srv.client(pool)
			store, err := ululeredis.NewStoreWithOptions(client, ulule.StoreOptions{Prefix: "ulule"})
			if err != nil {
				_ = client.Close()
				return nil, nil, err
			}
			lim := ulule.New(store, ulule.Rate{Period: replicaWindow, Limit: int64(o.replicaLimit)})
			take := func(key string) (bool, error) {
				res, err := lim.Get(context.Background(), key)
				return err == nil && !res.Reached, err
			}
			return func() replicaTake { return take }, func() { _ = client.Close() }, nil
		}},
		fiberReplica("fiber-fixed-redis [mw]", fiberlimiter.FixedWindow{}),
		fiberReplica("fiber-sliding-redis [mw]", fiberlimiter.SlidingWindow{}),
	}
}

// replicasResult holds figure 5: per variant, the admitted count and the
// failed decisions of each round.
type replicasResult struct {
	o        options
	variants []string
	admitted map[string][]float64
	failed   map[string]int64
	firstErr map[string]error
}

// runReplicas measures figure 5: each round, for every variant in turn,
// o.replicas instances each with its own client, and o.replicaCallers
// goroutines (goroutine g on replica g mod replicas) sending
// o.replicaRequests requests for one fresh key.
func runReplicas(o options, srv *redisServer) (*replicasResult, error) {
	variants := replicaVariants()
	res := &replicasResult{o: o, admitted: map[string][]float64{}, failed: map[string]int64{}, firstErr: map[string]error{}}
	for _, v := range variants {
		res.variants = append(res.variants, v.name)
	}
	pool := (o.replicaCallers + o.replicas - 1) / o.replicas
	for round := range o.rounds {
		progressf(o, "5. admitted across %d replicas: round %d/%d", o.replicas, round+1, o.rounds)
		for _, vi := range rotate(len(variants), round) {
			v := variants[vi]
			takes := make([]func() replicaTake, o.replicas)
			var closers []func()
			for r := range takes {
				newTake, closeFn, err := v.open(srv, pool, o)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				takes[r] = newTake
				closers = append(closers, closeFn)
			}
			key := "replicas-" + strconv.Itoa(round) + "-" + strconv.Itoa(vi) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			var next, admitted, failed atomic.Int64
			var firstErr atomic.Pointer[error]
			var wg sync.WaitGroup
			for g := range o.replicaCallers {
				take := takes[g%o.replicas]()
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(o.replicaRequests) {
						ok, err := take(key)
						switch {
						case err != nil:
							failed.Add(1)
							firstErr.CompareAndSwap(nil, &err)
						case ok:
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			for _, c := range closers {
				c()
			}
			res.admitted[v.name] = append(res.admitted[v.name], float64(admitted.Load()))
			res.failed[v.name] += failed.Load()
			if e := firstErr.Load(); e != nil && res.firstErr[v.name] == nil {
				res.firstErr[v.name] = *e
			}
		}
	}
	return res, nil
}

// tables renders figure 5.
func (r *replicasResult) tables() []*table {
	o := r.o
	t := &table{
		title: fmt.Sprintf("5. Admitted across %d replicas sharing one Redis (%d requests, one fresh key, limit %d per %.0f h, %d goroutines)",
			o.replicas, o.replicaRequests, o.replicaLimit, replicaWindow.Hours(), o.replicaCallers),
		header: []string{"variant", "admitted (median)", "min - max", "admitted / limit", "failed"},
		notes: []string{
			"Each replica is its own limiter instance with its own Redis client; exact is admitted = limit.",
			"ours runs with FailurePolicy FailClosed here, so a storage failure shows as failed instead of as a local decision.",
		},
	}
	for _, v := range r.variants {
		a := r.admitted[v]
		lo, hi := a[0], a[0]
		for _, x := range a {
			lo, hi = min(lo, x), max(hi, x)
		}
		t.add(v, fmt.Sprintf("%.0f", median(a)), fmt.Sprintf("%.0f - %.0f", lo, hi),
			fmtRatio(median(a)/float64(o.replicaLimit)), strconv.FormatInt(r.failed[v], 10))
		if e := r.firstErr[v]; e != nil {
			t.notes = append(t.notes, fmt.Sprintf("WARNING: %s: first failure: %v", v, e))
		}
	}
	return []*table{t}
}
