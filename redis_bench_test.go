package limiter

// Redis benchmarks: decisions per second, commands per decision, memory per
// key and over-admission across replicas, for this limiter's Redis store
// (directly and as Fiber middleware), go-redis/redis_rate, and Fiber's own
// limiter on gofiber/storage/redis. Each benchmark function starts its own
// redis-server on a free loopback port (internal/redistest) and is skipped
// when there is none.
//
// Recommended (about 5 minutes on 2 shared cores). The throughput table
// needs many decisions per sub-benchmark; the others repeat a whole
// measurement (rounds of decisions, or 10,000 keys) per b.N iteration, so
// they run once (they skip themselves when b.N > 100, as with a large
// -benchtime=Nx meant for the table):
//
//	go test -run '^$' -bench 'BenchmarkRedisDecisions' -benchtime=30000x -benchmem -count=1 .
//	go test -run '^$' -bench 'BenchmarkRedisVersusRedisRate' -benchtime=1x .
//	go test -run '^$' -bench 'BenchmarkRedis(CommandsPerDecision|MemoryPerKey|ReplicasAdmitted)' -benchtime=1x -benchmem -count=1 .
//
// Decisions: keys=hot is one key per variant; keys=100k cycles over 100,000
// distinct keys with a cursor per variant that carries on across the
// callers' sub-benchmarks, so with 30000x (3 × 30,001 < 100,000 decisions
// per variant) every decision is a key's first: a new client, whose GET
// misses and whose SET creates the key.

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	fiberredis "github.com/gofiber/storage/redis/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// rbKeySpace is the number of distinct keys of keys=100k; index rbKeySpace
// of a key list is the hot key.
const rbKeySpace = 100_000

// rbMax admits everything: 10^9 per minute. Ours panics at New when Max ×
// Expiration is beyond its exact arithmetic: 10^9 × 6·10^7 µs = 6·10^16 <
// 2^60, 10^9 × 6·10^4 ms = 6·10^13 < 2^51, and 10^9 < 2^32.
const rbMax = 1_000_000_000

var rbClientKeys = sync.OnceValue(func() []string {
	return rbPrefixed("")
})

// rbPrefixed returns prefix + "client-<i>" for every i, then prefix + "hot".
func rbPrefixed(prefix string) []string {
	keys := make([]string, rbKeySpace+1)
	for i := range rbKeySpace {
		keys[i] = prefix + "client-" + strconv.Itoa(i)
	}
	keys[rbKeySpace] = prefix + "hot"
	return keys
}

// rbVariant is one way of making a Redis decision. open connects a fresh
// client (pool connections, hook when not nil) and returns decide, which
// makes one decision for the key of index i and fails unless it admits,
// and done, which closes everything open made.
type rbVariant struct {
	name string
	open func(b *testing.B, srv *redistest.Server, pool int, hook goredis.Hook) (decide func(i int) error, done func())
}

func rbClient(srv *redistest.Server, pool int, hook goredis.Hook) *goredis.Client {
	// A hook sees storage/redis's calls on a client with
	// ContextTimeoutEnabled only (see redis.New).
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: pool, ContextTimeoutEnabled: hook != nil})
	if hook != nil {
		c.AddHook(hook)
	}
	return c
}

func rbHeaderKey(c *fiber.Ctx) string { return c.Get("X-Key") }

// rbApp is a Fiber app with mw, served through app.Handler().
func rbApp(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(mw)
	app.Get("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// rbServe sends one request with a fresh RequestCtx and X-Key: key, and
// returns its status.
func rbServe(h fasthttp.RequestHandler, key string) int {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	h(ctx)
	return ctx.Response.StatusCode()
}

func rbHandlerDecide(h fasthttp.RequestHandler, keys []string) func(int) error {
	return func(i int) error {
		if code := rbServe(h, keys[i]); code != fiber.StatusOK {
			return fmt.Errorf("key %q: status %d, want 200", keys[i], code)
		}
		return nil
	}
}

func rbStoreVariant(name string, alg redis.Algorithm, tag string, opts ...redis.Option) rbVariant {
	return rbVariant{name, func(b *testing.B, srv *redistest.Server, pool int, hook goredis.Hook) (func(int) error, func()) {
		store := redis.New(rbClient(srv, pool, hook), opts...)
		keys := rbPrefixed("store:" + tag + ":")
		rule := redis.Rule{Algorithm: alg, Limit: rbMax, Window: time.Minute}
		ctx := context.Background()
		decide := func(i int) error {
			res, err := store.Take(ctx, keys[i], rule, 1)
			if err != nil {
				return err
			}
			if !res.Allowed {
				return fmt.Errorf("key %q denied: %+v", keys[i], res)
			}
			return nil
		}
		return decide, func() { _ = store.Close() }
	}}
}

func rbHandlerVariant(name string, mw LimiterHandler) rbVariant {
	return rbVariant{name, func(b *testing.B, srv *redistest.Server, pool int, hook goredis.Hook) (func(int) error, func()) {
		store := redis.New(rbClient(srv, pool, hook))
		h := rbApp(New(Config{
			Max: rbMax, Expiration: time.Minute, KeyGenerator: rbHeaderKey,
			Storage: store, LimiterMiddleware: mw, KeyPrefix: "handler:",
		}))
		return rbHandlerDecide(h, rbClientKeys()), func() { _ = store.Close() }
	}}
}

func rbVariants() []rbVariant {
	return []rbVariant{
		rbStoreVariant("store-fixed", redis.FixedWindow, "fw"),
		rbStoreVariant("store-sliding", redis.SlidingWindow, "sw"),
		rbStoreVariant("store-token", redis.TokenBucket, "tb"),
		rbStoreVariant("store-fixed-unpipelined", redis.FixedWindow, "fwu", redis.WithoutPipelining()),
		rbHandlerVariant("handler-fixed", FixedWindow{}),
		rbHandlerVariant("handler-token", TokenBucket{}),
		{"redis_rate", func(b *testing.B, srv *redistest.Server, pool int, hook goredis.Hook) (func(int) error, func()) {
			client := rbClient(srv, pool, hook)
			rl := redis_rate.NewLimiter(client)
			limit := redis_rate.Limit{Rate: rbMax, Burst: rbMax, Period: time.Minute}
			keys := rbClientKeys() // stored as "rate:" + key
			ctx := context.Background()
			decide := func(i int) error {
				res, err := rl.Allow(ctx, keys[i], limit)
				if err != nil {
					return err
				}
				if res.Allowed < 1 {
					return fmt.Errorf("key %q denied: %+v", keys[i], res)
				}
				return nil
			}
			return decide, func() { _ = client.Close() }
		}},
		{"fiber-redis", func(b *testing.B, srv *redistest.Server, pool int, hook goredis.Hook) (func(int) error, func()) {
			storage := fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.Port, PoolSize: pool})
			if hook != nil {
				storage.Conn().AddHook(hook)
			}
			h := rbApp(fiberlimiter.New(fiberlimiter.Config{
				Max: rbMax, Expiration: time.Minute, KeyGenerator: rbHeaderKey, Storage: storage,
			}))
			return rbHandlerDecide(h, rbClientKeys()), func() { _ = storage.Close() }
		}},
	}
}

// rbDecide makes n decisions from exactly callers goroutines, which pull
// indexes 0..n-1 from a shared counter, and returns the time taken.
// key maps a decision's index to its key's index.
func rbDecide(n, callers int, decide func(int) error, key func(int) int) (time.Duration, error) {
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || firstErr.Load() != nil {
					return
				}
				if err := decide(key(int(i))); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr.Load(); err != nil {
		return elapsed, *err
	}
	return elapsed, nil
}

func rbHot(int) int { return rbKeySpace }

// rbOnce skips a benchmark that repeats a whole measurement per iteration
// when b.N is, or is going to be (-benchtime=Nx), too large for that to end
// in reasonable time.
func rbOnce(b *testing.B) {
	n := b.N
	if f := flag.Lookup("test.benchtime"); f != nil {
		if x, ok := strings.CutSuffix(f.Value.String(), "x"); ok {
			if v, err := strconv.Atoi(x); err == nil {
				n = max(n, v)
			}
		}
	}
	if n > 100 {
		b.Skipf("each iteration is a whole measurement; b.N=%d would take too long: use -benchtime=1x", n)
	}
}

// BenchmarkRedisDecisions measures Redis decisions per second for every
// variant, at 1, 8 and 64 callers, on one hot key and over 100,000 keys.
func BenchmarkRedisDecisions(b *testing.B) {
	srv := redistest.Start(b)
	cursors := map[string]*atomic.Int64{} // per variant, for keys=100k
	for _, keys := range []string{"hot", "100k"} {
		for _, callers := range []int{1, 8, 64} {
			for _, v := range rbVariants() {
				cursor := cursors[v.name]
				if cursor == nil {
					cursor = new(atomic.Int64)
					cursors[v.name] = cursor
				}
				b.Run(fmt.Sprintf("keys=%s/callers=%d/%s", keys, callers, v.name), func(b *testing.B) {
					decide, done := v.open(b, srv, callers, nil)
					defer done()
					key := rbHot
					if keys == "100k" {
						base := int(cursor.Add(int64(b.N))) - b.N
						key = func(i int) int { return (base + i) % rbKeySpace }
					}
					b.ReportAllocs()
					b.ResetTimer()
					elapsed, err := rbDecide(b.N, callers, decide, key)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				})
			}
		}
	}
}

// BenchmarkRedisVersusRedisRate measures each store variant's decisions
// per second against redis_rate's, interleaved: each of rounds rounds runs
// every variant in turn (a fresh client each, warmed up) for the same
// number of decisions, so a slow phase of the machine falls on all of them
// alike. It reports the median over the rounds of each variant's ratio to
// redis_rate in that round (x-redis_rate; above 1 is faster), and
// redis_rate's median decisions/s. Run it once:
//
//	go test -run '^$' -bench BenchmarkRedisVersusRedisRate -benchtime=1x .
func BenchmarkRedisVersusRedisRate(b *testing.B) {
	const rounds = 7
	srv := redistest.Start(b)
	var variants []rbVariant
	for _, v := range rbVariants() {
		if strings.HasPrefix(v.name, "store-") || v.name == "redis_rate" {
			variants = append(variants, v)
		}
	}
	for _, keys := range []string{"hot", "100k"} {
		for _, callers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("keys=%s/callers=%d", keys, callers), func(b *testing.B) {
				rbOnce(b)
				decisions := 20_000
				if callers == 1 {
					decisions = 5_000 // a round trip at a time
				}
				rate := make(map[string][]float64, len(variants))
				cursor := 0 // keys=100k: the same keys for every variant in a round
				for range rounds {
					for _, v := range variants {
						decide, done := v.open(b, srv, callers, nil)
						key := rbHot
						if keys == "100k" {
							base := cursor
							key = func(i int) int { return (base + i) % rbKeySpace }
						}
						if _, err := rbDecide(10*callers, callers, decide, rbHot); err != nil {
							b.Fatal(err)
						}
						elapsed, err := rbDecide(decisions, callers, decide, key)
						done()
						if err != nil {
							b.Fatal(err)
						}
						rate[v.name] = append(rate[v.name], float64(decisions)/elapsed.Seconds())
					}
					cursor += decisions
				}
				base := rate["redis_rate"]
				for _, v := range variants {
					if v.name == "redis_rate" {
						continue
					}
					ratios := make([]float64, rounds)
					for r := range ratios {
						ratios[r] = rate[v.name][r] / base[r]
					}
					b.ReportMetric(rbMedian(ratios), v.name+"-x-redis_rate")
				}
				b.ReportMetric(rbMedian(base), "redis_rate-decisions/s")
			})
		}
	}
}

// rbMedian is the median of xs, which it sorts.
func rbMedian(xs []float64) float64 {
	sort.Float64s(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
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
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	for _, v := range rbVariants() {
		b.Run(v.name, func(b *testing.B) {
			rbOnce(b)
			var counter rbCounter
			decide, done := v.open(b, srv, callers, &counter)
			defer done()
			// Warm up: open the pool's connections, load the scripts.
			if _, err := rbDecide(10*callers, callers, decide, rbHot); err != nil {
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
				if _, err := rbDecide(decisions, callers, decide, rbHot); err != nil {
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
// refilled, 36 s after one request). open returns the decision for an IP and the Redis key it
// writes.
type rbMemVariant struct {
	name string
	open func(srv *redistest.Server) (decide func(ip string) error, redisKey func(ip string) string, done func())
}

func rbMemStore(name string, alg redis.Algorithm, tag string) rbMemVariant {
	return rbMemVariant{name, func(srv *redistest.Server) (func(string) error, func(string) string, func()) {
		store := redis.New(rbClient(srv, 1, nil))
		rule := redis.Rule{Algorithm: alg, Limit: 100, Window: time.Hour}
		key := func(ip string) string { return "limiter:" + tag + ":" + ip }
		decide := func(ip string) error {
			res, err := store.Take(context.Background(), key(ip), rule, 1)
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
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	ips := make([]string, nKeys)
	for i := range ips {
		ips[i] = "203.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	variants := []rbMemVariant{
		rbMemStore("store-fixed", redis.FixedWindow, "fw"),
		rbMemStore("store-sliding", redis.SlidingWindow, "sw"),
		rbMemStore("store-token", redis.TokenBucket, "tb"),
		{"redis_rate", func(srv *redistest.Server) (func(string) error, func(string) string, func()) {
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
		{"fiber-redis", func(srv *redistest.Server) (func(string) error, func(string) string, func()) {
			storage := fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.Port, PoolSize: 1})
			h := rbApp(fiberlimiter.New(fiberlimiter.Config{
				Max: 100, Expiration: time.Hour, KeyGenerator: rbHeaderKey, Storage: storage,
			}))
			decide := func(ip string) error {
				if code := rbServe(h, ip); code != fiber.StatusOK {
					return fmt.Errorf("%s: status %d", ip, code)
				}
				return nil
			}
			return decide, func(ip string) string { return ip }, func() { _ = storage.Close() }
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			rbOnce(b)
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

// BenchmarkRedisReplicasAdmitted runs 3 Fiber apps ("replicas"), each with
// its own Redis client, and sends 5000 requests for one key from 96
// goroutines spread over them, with Max 1000 per 1000h; it reports how many
// were admitted (the mean over b.N rounds, a fresh key each). Fiber's
// limiter reads and writes its storage in two commands under a per-process
// lock; ours detects the fiberredis storage through Conn() and decides in
// one script.
func BenchmarkRedisReplicasAdmitted(b *testing.B) {
	const replicas, callers, requests, limit = 3, 96, 5000, 1000
	srv := redistest.Start(b)
	variants := []struct {
		name string
		mw   func(fiber.Storage) fiber.Handler
	}{
		{"fiber-fixed", func(s fiber.Storage) fiber.Handler {
			return fiberlimiter.New(fiberlimiter.Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s})
		}},
		{"fiber-sliding", func(s fiber.Storage) fiber.Handler {
			return fiberlimiter.New(fiberlimiter.Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s,
				LimiterMiddleware: fiberlimiter.SlidingWindow{}})
		}},
		{"ours-fixed", func(s fiber.Storage) fiber.Handler {
			return New(Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s})
		}},
		{"ours-sliding", func(s fiber.Storage) fiber.Handler {
			return New(Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s, LimiterMiddleware: SlidingWindow{}})
		}},
		{"ours-token", func(s fiber.Storage) fiber.Handler {
			return New(Config{Max: limit, Expiration: 1000 * time.Hour, KeyGenerator: rbHeaderKey, Storage: s, LimiterMiddleware: TokenBucket{}})
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			rbOnce(b)
			handlers := make([]fasthttp.RequestHandler, replicas)
			for i := range handlers {
				storage := fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.Port, PoolSize: callers})
				defer func() { _ = storage.Close() }()
				handlers[i] = rbApp(v.mw(storage))
			}
			b.ReportAllocs()
			total := 0
			for round := range b.N {
				key := "replicas-" + v.name + "-" + strconv.Itoa(round) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				var admitted atomic.Int64
				_, err := rbDecide(requests, callers, func(i int) error {
					switch code := rbServe(handlers[i%replicas], key); code {
					case fiber.StatusOK:
						admitted.Add(1)
					case fiber.StatusTooManyRequests:
					default:
						return fmt.Errorf("status %d", code)
					}
					return nil
				}, func(i int) int { return i })
				if err != nil {
					b.Fatal(err)
				}
				total += int(admitted.Load())
			}
			b.ReportMetric(float64(total)/float64(b.N), "admitted")
		})
	}
}
