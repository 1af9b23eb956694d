package main

// Redis benchmarks of what the program's figures do not show, side by
// side: the commands behind a decision and the memory a key takes in Redis,
// for this limiter's Redis store (directly and as Fiber middleware),
// go-redis/redis_rate, and Fiber's own limiter on gofiber/storage/redis.
// Each benchmark function starts its own redis-server on a free loopback
// port (startRedis: never 6379, persistence off) and is skipped when there
// is none, or fails with LIMITER_REQUIRE_REDIS=1. Each b.N iteration
// repeats a whole measurement, so they run once (they skip themselves when
// b.N > 100):
//
//	cd bench && go test -run '^$' -bench 'BenchmarkRedis(CommandsPerDecision|MemoryPerKey)' -benchtime=1x -benchmem -count=1 .
//
// Decisions per second, against redis_rate and the others, are figures 3
// to 4 of the program (go run . -only 3).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	goredis "github.com/redis/go-redis/v9"
)

// rbServer starts a redis-server of b's own, stopped when b ends.
func rbServer(b *testing.B) *redisServer {
	b.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("LIMITER_REQUIRE_REDIS") == "1" {
			b.Fatalf("redis-server not found and LIMITER_REQUIRE_REDIS=1: %v", err)
		}
		b.Skipf("redis-server not found: %v", err)
	}
	srv, err := startRedis("redis-server")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.stop)
	return srv
}

// rbAdmin is a client of srv for INFO, CONFIG and the like, closed when b
// ends.
func rbAdmin(b *testing.B, srv *redisServer) *goredis.Client {
	admin := srv.client(1)
	b.Cleanup(func() { _ = admin.Close() })
	return admin
}

// rbMax admits everything: 10^9 per minute (see redisMax).
const rbMax = redisMax

// rbHot is the one key every decision of BenchmarkRedisCommandsPerDecision
// is for, before each variant's prefix.
const rbHot = "hot"

// rbVariant is one way of making a Redis decision. open connects a fresh
// client (pool connections, hook when not nil) and returns decide, which
// makes one decision for the variant's hot key and fails unless it
// admits, and done, which closes everything open made.
type rbVariant struct {
	name string
	open func(srv *redisServer, pool int, hook goredis.Hook) (decide func() error, done func())
}

func rbClient(srv *redisServer, pool int, hook goredis.Hook) *goredis.Client {
	// A hook sees storage/redis's calls on a client with
	// ContextTimeoutEnabled only (see redis.New).
	c := goredis.NewClient(&goredis.Options{Addr: srv.addr(), PoolSize: pool, ContextTimeoutEnabled: hook != nil})
	if hook != nil {
		c.AddHook(hook)
	}
	return c
}

// rbHandlerDecide sends a request for key through mw in a Fiber app (see
// newApp), each with a request context of its own (decide is called by
// several goroutines at once), and fails unless the answer is 200.
func rbHandlerDecide(mw fiber.Handler, key string) func() error {
	h, k := newApp(mw), []byte(key)
	return func() error {
		if code := newRequest().serve(h, k); code != fiber.StatusOK {
			return fmt.Errorf("key %q: status %d, want 200", key, code)
		}
		return nil
	}
}

func rbStoreVariant(name string, alg redisengine.Algorithm, tag string, opts ...redis.Option) rbVariant {
	return rbVariant{name, func(srv *redisServer, pool int, hook goredis.Hook) (func() error, func()) {
		store := redis.New(rbClient(srv, pool, hook), opts...)
		engine := redisengine.OfStore(store) // the script calls the limiter makes
		key := "store:" + tag + ":" + rbHot
		rule := redisengine.Rule{Algorithm: alg, Max: rbMax, Expiration: time.Minute}
		ctx := context.Background()
		decide := func() error {
			res, err := engine.Take(ctx, key, rule, 1)
			if err != nil {
				return err
			}
			if !res.Allowed {
				return fmt.Errorf("key %q denied: %+v", key, res)
			}
			return nil
		}
		return decide, func() { _ = store.Close() }
	}}
}

func rbHandlerVariant(name string, alg limiter.LimiterHandler) rbVariant {
	return rbVariant{name, func(srv *redisServer, pool int, hook goredis.Hook) (func() error, func()) {
		store := redis.New(rbClient(srv, pool, hook))
		mw := limiter.New(limiter.Config{
			Max: rbMax, Expiration: time.Minute, KeyGenerator: headerKey,
			Storage: store, LimiterMiddleware: alg, KeyPrefix: "handler:",
		})
		return rbHandlerDecide(mw, rbHot), func() { _ = store.Close() }
	}}
}

func rbVariants() []rbVariant {
	return []rbVariant{
		rbStoreVariant("store-fixed", redisengine.FixedWindow, "fw"),
		rbStoreVariant("store-sliding", redisengine.SlidingWindow, "sw"),
		rbStoreVariant("store-token", redisengine.TokenBucket, "tb"),
		rbStoreVariant("store-fixed-unpipelined", redisengine.FixedWindow, "fwu", redis.WithoutPipelining()),
		rbHandlerVariant("handler-fixed", limiter.FixedWindow{}),
		rbHandlerVariant("handler-token", limiter.TokenBucket{}),
		{"redis_rate", func(srv *redisServer, pool int, hook goredis.Hook) (func() error, func()) {
			client := rbClient(srv, pool, hook)
			rl := redis_rate.NewLimiter(client)
			limit := redis_rate.Limit{Rate: rbMax, Burst: rbMax, Period: time.Minute}
			ctx := context.Background()
			decide := func() error {
				res, err := rl.Allow(ctx, rbHot, limit) // stored as "rate:hot"
				if err != nil {
					return err
				}
				if res.Allowed < 1 {
					return fmt.Errorf("key %q denied: %+v", rbHot, res)
				}
				return nil
			}
			return decide, func() { _ = client.Close() }
		}},
		{"fiber-redis", func(srv *redisServer, pool int, hook goredis.Hook) (func() error, func()) {
			storage := newFiberRedis(srv, pool)
			if hook != nil {
				storage.Conn().AddHook(hook)
			}
			mw := fiberlimiter.New(fiberlimiter.Config{
				Max: rbMax, Expiration: time.Minute, KeyGenerator: headerKey, Storage: storage,
			})
			return rbHandlerDecide(mw, rbHot), func() { _ = storage.Close() }
		}},
	}
}

// rbDecide makes n decisions from exactly callers goroutines, which pull
// them from a shared counter, and returns the first error.
func rbDecide(n, callers int, decide func() error) error {
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && firstErr.Load() == nil {
				if err := decide(); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return *err
	}
	return nil
}

// rbCounter is a go-redis hook that counts the commands a client sends, by
// name: the round trips of a decision (none of the variants pipelines).
type rbCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *rbCounter) reset() {
	c.mu.Lock()
	c.calls = map[string]int{}
	c.mu.Unlock()
}

func (c *rbCounter) add(name string, n int) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[name] += n
	c.mu.Unlock()
}

func (c *rbCounter) snapshot() (total int, calls map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls = map[string]int{}
	for k, v := range c.calls {
		calls[k] = v
		total += v
	}
	return total, calls
}

func (c *rbCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *rbCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.add(strings.ToLower(cmd.Name()), 1)
		return next(ctx, cmd)
	}
}

func (c *rbCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			c.add(strings.ToLower(cmd.Name()), 1)
		}
		return next(ctx, cmds)
	}
}

// rbCommandStats parses INFO commandstats into calls and µs spent per
// command.
func rbCommandStats(ctx context.Context, admin *goredis.Client) (calls, usec map[string]int, err error) {
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, nil, err
	}
	calls, usec = map[string]int{}, map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for _, field := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, nil, fmt.Errorf("commandstats line %q: %w", line, err)
			}
			if k == "calls" {
				calls[name] = n
			} else {
				usec[name] = n
			}
		}
	}
	return calls, usec, nil
}

func rbFormatCounts(calls map[string]int, per int) string {
	names := make([]string, 0, len(calls))
	for k := range calls {
		names = append(names, k)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, k := range names {
		fmt.Fprintf(&sb, " %s=%.3g", k, float64(calls[k])/float64(per))
	}
	return sb.String()
}

// BenchmarkRedisCommandsPerDecision counts, for each variant at 8 callers on
// one hot key, the Redis commands behind 2000 decisions, between CONFIG
// RESETSTAT and INFO commandstats. cmds/decision is every command the server
// counted but INFO and CONFIG, which includes the commands a Lua script
// calls (TIME, GET, SET); roundtrips/decision is what the variant's client
// sent (its go-redis hook). Each b.N iteration repeats the measurement; the
// last one is reported. server-µs/decision is the time Redis spent executing
// the commands the client sent (INFO commandstats usec), its CPU per
// decision.
func BenchmarkRedisCommandsPerDecision(b *testing.B) {
	const callers, decisions = 8, 2000
	srv := rbServer(b)
	admin := rbAdmin(b, srv)
	ctx := context.Background()
	for _, v := range rbVariants() {
		b.Run(v.name, func(b *testing.B) {
			redistest.MeasureOnce(b)
			var counter rbCounter
			decide, done := v.open(srv, callers, &counter)
			defer done()
			// Warm up: open the pool's connections, load the scripts.
			if err := rbDecide(10*callers, callers, decide); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var server, usec map[string]int
			var sent int
			var sentBy map[string]int
			for range b.N {
				if err := admin.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				counter.reset()
				if err := rbDecide(decisions, callers, decide); err != nil {
					b.Fatal(err)
				}
				sent, sentBy = counter.snapshot()
				var err error
				if server, usec, err = rbCommandStats(ctx, admin); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			total := 0
			for name, n := range server {
				if strings.HasPrefix(name, "info") || strings.HasPrefix(name, "config") {
					delete(server, name)
					continue
				}
				total += n
			}
			b.ReportMetric(float64(total)/decisions, "cmds/decision")
			b.ReportMetric(float64(server["evalsha"])/decisions, "evalsha/decision")
			// Server time of a decision: the commands the client sent (a
			// script's own calls are inside its EVALSHA's time).
			serverUsec := 0
			for name := range sentBy {
				serverUsec += usec[name]
			}
			b.ReportMetric(float64(serverUsec)/decisions, "server-µs/decision")
			b.ReportMetric(float64(sent)/decisions, "roundtrips/decision")
			b.Logf("server per decision:%s; client sent per decision:%s", rbFormatCounts(server, decisions), rbFormatCounts(sentBy, decisions))
		})
	}
}

// rbUsedMemory is INFO memory's used_memory.
func rbUsedMemory(ctx context.Context, admin *goredis.Client) (int64, error) {
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

// rbMemVariant fills 10,000 keys with one decision each under a limit of
// 100 per hour (long enough that no key expires while they are counted: a
// token bucket's state, ours and redis_rate's, lasts only until it has
// refilled, 36 s after one request). open returns the decision for an IP
// and the Redis key it writes.
type rbMemVariant struct {
	name string
	open func(srv *redisServer) (decide func(ip string) error, redisKey func(ip string) string, done func())
}

func rbMemStore(name string, alg redisengine.Algorithm, tag string) rbMemVariant {
	return rbMemVariant{name, func(srv *redisServer) (func(string) error, func(string) string, func()) {
		store := redis.New(rbClient(srv, 1, nil))
		engine := redisengine.OfStore(store)
		rule := redisengine.Rule{Algorithm: alg, Max: 100, Expiration: time.Hour}
		key := func(ip string) string { return "limiter:" + tag + ":" + ip }
		decide := func(ip string) error {
			res, err := engine.Take(context.Background(), key(ip), rule, 1)
			if err == nil && !res.Allowed {
				err = fmt.Errorf("%s denied", ip)
			}
			return err
		}
		return decide, key, func() { _ = store.Close() }
	}}
}

// BenchmarkRedisMemoryPerKey writes 10,000 keys (one decision each, 100 per
// hour) per variant into an emptied Redis and reports MEMORY USAGE key
// SAMPLES 0 averaged over 100 of them (B/key) and the growth of used_memory
// divided by 10,000 (used_memory-B/key), which includes the keyspace's and
// the expires' hash tables. Keys are what each library writes for an IPv4
// client: ours "limiter:<fw|sw|tb>:203.0.x.y", redis_rate's
// "rate:203.0.x.y", Fiber's the bare "203.0.x.y".
func BenchmarkRedisMemoryPerKey(b *testing.B) {
	const nKeys, nSample = 10_000, 100
	srv := rbServer(b)
	admin := rbAdmin(b, srv)
	ctx := context.Background()
	ips := make([]string, nKeys)
	for i := range ips {
		ips[i] = "203.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	variants := []rbMemVariant{
		rbMemStore("store-fixed", redisengine.FixedWindow, "fw"),
		rbMemStore("store-sliding", redisengine.SlidingWindow, "sw"),
		rbMemStore("store-token", redisengine.TokenBucket, "tb"),
		{"redis_rate", func(srv *redisServer) (func(string) error, func(string) string, func()) {
			client := rbClient(srv, 1, nil)
			rl := redis_rate.NewLimiter(client)
			decide := func(ip string) error {
				res, err := rl.Allow(context.Background(), ip, redis_rate.PerHour(100))
				if err == nil && res.Allowed < 1 {
					err = fmt.Errorf("%s denied", ip)
				}
				return err
			}
			return decide, func(ip string) string { return "rate:" + ip }, func() { _ = client.Close() }
		}},
		{"fiber-redis", func(srv *redisServer) (func(string) error, func(string) string, func()) {
			storage := newFiberRedis(srv, 1)
			h := newApp(fiberlimiter.New(fiberlimiter.Config{
				Max: 100, Expiration: time.Hour, KeyGenerator: headerKey, Storage: storage,
			}))
			req := newRequest() // one caller
			decide := func(ip string) error {
				if code := req.serve(h, []byte(ip)); code != fiber.StatusOK {
					return fmt.Errorf("%s: status %d", ip, code)
				}
				return nil
			}
			return decide, func(ip string) string { return ip }, func() { _ = storage.Close() }
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			redistest.MeasureOnce(b)
			decide, redisKey, done := v.open(srv)
			defer done()
			b.ReportAllocs()
			var perKey, usedPerKey float64
			for range b.N {
				b.StopTimer()
				if err := admin.Do(ctx, "FLUSHALL", "SYNC").Err(); err != nil {
					b.Fatal(err)
				}
				// Load the script and open the connection, then forget the key.
				if err := decide("192.0.2.1"); err != nil {
					b.Fatal(err)
				}
				if err := admin.Del(ctx, redisKey("192.0.2.1")).Err(); err != nil {
					b.Fatal(err)
				}
				before, err := rbUsedMemory(ctx, admin)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for _, ip := range ips {
					if err := decide(ip); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after, err := rbUsedMemory(ctx, admin)
				if err != nil {
					b.Fatal(err)
				}
				if n := admin.DBSize(ctx).Val(); n != nKeys {
					b.Fatalf("DBSIZE %d after %d keys, want %d", n, nKeys, nKeys)
				}
				var sum int64
				for i := range nSample {
					k := redisKey(ips[i*(nKeys/nSample)])
					n, err := admin.MemoryUsage(ctx, k, 0).Result()
					if err != nil {
						b.Fatalf("MEMORY USAGE %s: %v", k, err)
					}
					sum += n
				}
				perKey = float64(sum) / nSample
				usedPerKey = float64(after-before) / nKeys
				sample := redisKey(ips[0])
				b.Logf("key %q value %q ttl %v", sample, admin.Get(ctx, sample).Val(), admin.PTTL(ctx, sample).Val())
			}
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(usedPerKey, "used_memory-B/key")
		})
	}
}
