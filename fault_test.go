package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	fiberredis "github.com/gofiber/storage/redis/v3"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// The fault tests run the limiter against real redis-server processes that
// are killed, restarted, paused and flushed under it, for each
// FailurePolicy. A test runs three replicas: three Fiber apps, each with its
// own go-redis client and its own limiter, keyed by X-Key, on one
// redis-server of the subtest's own, so that a kill cannot leak into
// another subtest. Every rule is faultMax per faultExpiration, long enough
// that nothing refills during a test.

const (
	faultMax        = 10
	faultExpiration = time.Hour
	faultReplicaN   = 3
	// faultRecoveryBound is how soon after Redis answers again every
	// replica must decide in Redis: the default BreakerCooldown (500 ms),
	// the probe and a margin.
	faultRecoveryBound = time.Second
	// faultGiveUp is how long a replica is polled before it is declared
	// not recovered, so that a slow recovery is measured, not just failed.
	faultGiveUp = 3 * time.Second
	// faultPoll is the interval of polls for a condition.
	faultPoll = 10 * time.Millisecond
	// faultSlowest is the most any request may take while Redis is
	// unavailable: the default StorageTimeout and a margin for the race
	// detector and the scheduler. Without the timeout a request would wait
	// on go-redis: about 0.5 s of dial retries, or its 3 s ReadTimeout.
	faultSlowest = 100*time.Millisecond + 400*time.Millisecond
	// faultPause is how long CLIENT PAUSE ALL holds Redis. With ALL,
	// Redis 7.0 postpones the admin's CLIENT UNPAUSE too, so the pause
	// always lasts this long: everything measured while paused must fit.
	faultPause = 1000 * time.Millisecond
	// faultCallsTimeout is the StorageTimeout of the tests about what
	// reaches Redis rather than when: long enough that a busy machine
	// cannot turn a slow answer into a failure.
	faultCallsTimeout = 5 * time.Second
	// faultOpenP99 bounds the p99 of requests that the breaker keeps off
	// Redis: a twentieth of the default StorageTimeout, which each of them
	// would take if it waited on Redis. The decision itself takes
	// microseconds; under the race detector on two shared cores, GC and
	// the host's stalls put the p99 of 2000 of them at 1-2 ms at times.
	faultOpenP99 = 5 * time.Millisecond
)

var faultPolicies = []FailurePolicy{FailFallback, FailOpen, FailClosed}

// faultClient is the kind of client a replica reaches Redis through.
type faultClient uint8

const (
	faultGoRedis            faultClient = iota // storage/redis (pipelining) over a go-redis client with its defaults
	faultGoRedisCtx                            // the same with ContextTimeoutEnabled
	faultFiberStorage                          // gofiber/storage/redis/v3
	faultGoRedisUnpipelined                    // storage/redis WithoutPipelining
)

func (k faultClient) String() string {
	return [...]string{"go-redis", "go-redis-ctx-timeout", "gofiber-storage", "go-redis-unpipelined"}[k]
}

// faultCase is a policy under test, with the kind of client its replicas use.
type faultCase struct {
	policy FailurePolicy
	kind   faultClient
}

func (c faultCase) String() string { return c.policy.String() + "/" + c.kind.String() }

// faultBothWays are the two ways storage/redis reaches Redis: pipelining
// concurrent calls (the default) and one call at a time.
var faultBothWays = []faultClient{faultGoRedis, faultGoRedisUnpipelined}

// faultEveryPolicyBothWays is every policy with the default, pipelining
// store, and the default policy with an unpipelined one too.
func faultEveryPolicyBothWays() []faultCase {
	var cases []faultCase
	for _, policy := range faultPolicies {
		cases = append(cases, faultCase{policy, faultGoRedis})
	}
	return append(cases, faultCase{FailFallback, faultGoRedisUnpipelined})
}

// faultStorage returns a Config.Storage on a client of its own to srv,
// closed when the test ends.
func faultStorage(t *testing.T, srv *redistest.Server, kind faultClient) fiber.Storage {
	t.Helper()
	if kind == faultFiberStorage {
		s := fiberredis.New(fiberredis.Config{Host: "127.0.0.1", Port: srv.Port})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: kind == faultGoRedisCtx})
	t.Cleanup(func() { _ = client.Close() })
	if kind == faultGoRedisUnpipelined {
		return redis.New(client, redis.WithoutPipelining())
	}
	return redis.New(client)
}

// faultReplicas builds n replicas on srv: replica i runs cfg(i) with a
// Storage of kind on its own client.
func faultReplicas(t *testing.T, srv *redistest.Server, kind faultClient, n int, cfg func(i int) Config) []fasthttp.RequestHandler {
	t.Helper()
	replicas := make([]fasthttp.RequestHandler, n)
	for i := range replicas {
		c := cfg(i)
		c.Storage = faultStorage(t, srv, kind)
		replicas[i] = replicaHandler(c)
	}
	return replicas
}

// faultConfig is the rule of the fault tests under policy.
func faultConfig(policy FailurePolicy) Config {
	return Config{Max: faultMax, Expiration: faultExpiration, FailurePolicy: policy}
}

// faultResp is what a request got, and how long the replica took.
type faultResp struct {
	status                       int
	limit, remaining, retryAfter string
	took                         time.Duration
}

// faultGet sends GET / for key to h and times the handler call alone.
func faultGet(h fasthttp.RequestHandler, key string) faultResp {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	ctx.Request.Header.Set("X-Key", key)
	start := time.Now()
	h(&ctx)
	took := time.Since(start)
	r := faultResp{status: ctx.Response.StatusCode(), took: took}
	// Header names are compared as HTTP does, whatever case they are
	// stored in (Peek would look for fasthttp's normalized form).
	ctx.Response.Header.VisitAll(func(k, v []byte) {
		switch {
		case strings.EqualFold(string(k), "X-RateLimit-Limit"):
			r.limit = string(v)
		case strings.EqualFold(string(k), "X-RateLimit-Remaining"):
			r.remaining = string(v)
		case strings.EqualFold(string(k), fiber.HeaderRetryAfter):
			r.retryAfter = string(v)
		}
	})
	return r
}

// faultEach runs fn for every replica at once and waits for all.
func faultEach(replicas []fasthttp.RequestHandler, fn func(i int, h fasthttp.RequestHandler)) {
	var wg sync.WaitGroup
	for i, h := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, h)
		}()
	}
	wg.Wait()
}

// faultSend sends n requests for key(i) to each replica i, one after
// another on each replica and the replicas at once, and returns the
// answers by replica.
func faultSend(replicas []fasthttp.RequestHandler, key func(i int) string, n int) [][]faultResp {
	resps := make([][]faultResp, len(replicas))
	faultEach(replicas, func(i int, h fasthttp.RequestHandler) {
		for range n {
			resps[i] = append(resps[i], faultGet(h, key(i)))
		}
	})
	return resps
}

// faultSendConcurrently sends n requests for key(i) to each replica i, all
// at once, and returns the answers by replica.
func faultSendConcurrently(replicas []fasthttp.RequestHandler, key func(i int) string, n int) [][]faultResp {
	resps := make([][]faultResp, len(replicas))
	for i := range resps {
		resps[i] = make([]faultResp, n)
	}
	var wg sync.WaitGroup
	for i, h := range replicas {
		for j := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resps[i][j] = faultGet(h, key(i))
			}()
		}
	}
	wg.Wait()
	return resps
}

// faultPerReplica names a key of each replica's own.
func faultPerReplica(prefix string) func(i int) string {
	return func(i int) string { return prefix + "-r" + strconv.Itoa(i) }
}

// faultSame names one key for every replica.
func faultSame(key string) func(int) string { return func(int) string { return key } }

// faultCheckDegraded requires of answers that a replica gave while Redis
// was unavailable what policy promises, and that none took longer than
// faultSlowest, and returns how many were admitted. FailFallback: 200 or
// 429 with the local decision's X-RateLimit headers; FailOpen: 200 without
// them; FailClosed: 503 with Retry-After of the cool-down (1 s) and without
// them.
func faultCheckDegraded(t *testing.T, policy FailurePolicy, resps []faultResp) int {
	t.Helper()
	admitted := 0
	for n, r := range resps {
		require.LessOrEqual(t, r.took, faultSlowest, "request %d waited on Redis too long", n)
		switch policy {
		case FailFallback:
			require.Contains(t, []int{fiber.StatusOK, fiber.StatusTooManyRequests}, r.status, "request %d", n)
			require.Equal(t, strconv.Itoa(faultMax), r.limit, "request %d: the local decision's headers", n)
			require.NotEmpty(t, r.remaining, "request %d: the local decision's headers", n)
		case FailOpen:
			require.Equal(t, fiber.StatusOK, r.status, "request %d", n)
			require.Empty(t, r.limit+r.remaining, "request %d: FailOpen sends no rate-limit headers", n)
		case FailClosed:
			require.Equal(t, fiber.StatusServiceUnavailable, r.status, "request %d", n)
			require.Equal(t, "1", r.retryAfter, "request %d: Retry-After is the cool-down, rounded up", n)
			require.Empty(t, r.limit+r.remaining, "request %d: FailClosed sends no rate-limit headers", n)
		}
		if r.status == fiber.StatusOK {
			admitted++
		}
	}
	return admitted
}

// faultWantAdmitted is how many of sent requests for one key a replica
// admits while Redis is unavailable.
func faultWantAdmitted(policy FailurePolicy, sent int) int {
	switch policy {
	case FailFallback:
		return min(faultMax, sent) // the replica's own limiter
	case FailOpen:
		return sent
	}
	return 0
}

// faultFromRedis reports whether r came from Redis rather than from the
// policy, for a request whose key the replica has exhausted locally while
// Redis was unavailable and that Redis has counted fewer than faultMax
// times: FailFallback's local limiter rejects it where Redis admits it,
// FailOpen sends no X-RateLimit headers, FailClosed answers 503.
func faultFromRedis(policy FailurePolicy, r faultResp) bool {
	if policy == FailOpen {
		return r.limit != ""
	}
	return r.status == fiber.StatusOK
}

// faultAwaitRecovery polls every replica every faultPoll with requests for
// key(i) until its answer comes from Redis (faultFromRedis), and requires
// each to do so within faultRecoveryBound of since, when Redis answered
// again. It returns each replica's time to recover.
func faultAwaitRecovery(t *testing.T, replicas []fasthttp.RequestHandler, policy FailurePolicy, key func(i int) string, since time.Time) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(replicas))
	faultEach(replicas, func(i int, h fasthttp.RequestHandler) {
		for {
			r := faultGet(h, key(i))
			assert.Contains(t, []int{fiber.StatusOK, fiber.StatusTooManyRequests, fiber.StatusServiceUnavailable}, r.status, "replica %d", i)
			if policy != FailClosed {
				assert.NotEqual(t, fiber.StatusServiceUnavailable, r.status, "replica %d", i)
			}
			if faultFromRedis(policy, r) {
				took[i] = time.Since(since)
				return
			}
			if time.Since(since) > faultGiveUp {
				took[i] = -1
				return
			}
			time.Sleep(faultPoll)
		}
	})
	for i, d := range took {
		require.GreaterOrEqual(t, d, time.Duration(0), "replica %d did not decide in Redis within %v", i, faultGiveUp)
		require.LessOrEqual(t, d, faultRecoveryBound, "replica %d decided in Redis again only after %v", i, d)
	}
	return took
}

// faultRequireExact requires that a fresh key hammered across the
// replicas is admitted exactly faultMax times: every replica decides in
// Redis.
func faultRequireExact(t *testing.T, replicas []fasthttp.RequestHandler, key string) {
	t.Helper()
	require.Equal(t, faultMax, hammer(t, replicas, key, 10*faultMax, 4*len(replicas)), "fresh key %q", key)
}

// faultWaitFor polls cond every faultPoll until it holds, failing the test
// after faultGiveUp.
func faultWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(faultGiveUp)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(faultPoll)
	}
}

// faultHook records the calls of one replica's OnStorageError.
type faultHook struct {
	mu   sync.Mutex
	errs []error
}

func (h *faultHook) record(err error) {
	h.mu.Lock()
	h.errs = append(h.errs, err)
	h.mu.Unlock()
}

func (h *faultHook) calls() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.errs)
}

// faultHooks returns a hook for each of n replicas.
func faultHooks(n int) []*faultHook {
	hooks := make([]*faultHook, n)
	for i := range hooks {
		hooks[i] = &faultHook{}
	}
	return hooks
}

// faultQuantiles returns the median, the 99th percentile and the maximum
// of ds.
func faultQuantiles(ds []time.Duration) (p50, p99, maxd time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99+99)/100-1], s[len(s)-1]
}

// While Redis is killed, each policy does what it promises on every
// replica: FailFallback admits exactly Max per replica, from its own
// limiter, with X-RateLimit headers; FailOpen admits everything without
// them; FailClosed rejects everything with 503 and Retry-After. No request
// waits longer than StorageTimeout, and once the breakers are open the p99
// of a request is under faultOpenP99. Once a fresh, empty Redis takes the
// port, every replica decides in Redis again within a second (the key each
// exhausted locally is admitted again), and a fresh key hammered across
// the replicas is admitted exactly Max times. Also with
// gofiber/storage/redis/v3 as Storage.
func TestFaultKilledThenRestarted(t *testing.T) {
	cases := []faultCase{
		{FailFallback, faultGoRedis},
		{FailOpen, faultGoRedis},
		{FailClosed, faultGoRedis},
		{FailFallback, faultFiberStorage},
		{FailFallback, faultGoRedisUnpipelined},
	}
	for _, tc := range cases {
		t.Run(tc.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			replicas := faultReplicas(t, srv, tc.kind, faultReplicaN, func(int) Config { return faultConfig(tc.policy) })

			for i, h := range replicas { // Redis up: one count for all
				r := faultGet(h, "shared")
				require.Equal(t, fiber.StatusOK, r.status)
				require.Equal(t, strconv.Itoa(faultMax-1-i), r.remaining, "replica %d sees the shared count", i)
			}

			srv.Stop()
			const sent = 30
			down := faultSend(replicas, faultSame("down"), sent)
			admitted := make([]int, len(replicas))
			for i, resps := range down {
				admitted[i] = faultCheckDegraded(t, tc.policy, resps)
			}
			t.Logf("Redis down: admitted %v of %d per replica", admitted, sent)
			for i, n := range admitted {
				require.Equal(t, faultWantAdmitted(tc.policy, sent), n, "replica %d", i)
			}
			p50, p99, maxd := faultTimeOpenBreaker(t, replicas, tc.policy)
			t.Logf("Redis down, breakers open: %d requests: p50 %v, p99 %v, max %v", faultTimed, p50, p99, maxd)

			srv.Restart()
			recovery := faultAwaitRecovery(t, replicas, tc.policy, faultSame("down"), time.Now())
			t.Logf("decisions from Redis again after %v", recovery)
			faultRequireExact(t, replicas, "after")
		})
	}
}

// faultLoad sends requests to replicas from workers goroutines until
// stopped. Request n is for key "load-<n/15>", so every key sees both
// admissions and rejections (15 requests against Max 10). It tallies the
// statuses, the longest request, and when the latest request started that
// FailOpen or FailClosed answered instead of Redis.
type faultLoad struct {
	stop         atomic.Bool
	wg           sync.WaitGroup
	sent         atomic.Int64
	mu           sync.Mutex
	statuses     map[int]int
	slowest      time.Duration
	lastDegraded atomic.Int64 // UnixNano
}

func faultStartLoad(replicas []fasthttp.RequestHandler, policy FailurePolicy, workers int) *faultLoad {
	l := &faultLoad{statuses: map[int]int{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				n := l.sent.Add(1) - 1
				start := time.Now().UnixNano()
				r := faultGet(replicas[n%int64(len(replicas))], "load-"+strconv.FormatInt(n/15, 10))
				if (policy == FailOpen && r.limit == "") || (policy == FailClosed && r.status == fiber.StatusServiceUnavailable) {
					for last := l.lastDegraded.Load(); start > last && !l.lastDegraded.CompareAndSwap(last, start); last = l.lastDegraded.Load() {
					}
				}
				l.mu.Lock()
				l.statuses[r.status]++
				l.slowest = max(l.slowest, r.took)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// finish stops the load and returns the statuses' tally.
func (l *faultLoad) finish() map[int]int {
	l.stop.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statuses
}

// Killing Redis under a continuous load and restarting it 300 ms later
// panics nothing and gives no status but 200 and 429 (and FailClosed's
// 503): every replica's hook hears of the outage, FailOpen and FailClosed
// answer in Redis's place during it, and once the load stops a fresh key
// is exact again.
func TestFaultKilledMidLoad(t *testing.T) {
	for _, tc := range faultEveryPolicyBothWays() {
		policy := tc.policy
		t.Run(tc.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			hooks := faultHooks(faultReplicaN)
			replicas := faultReplicas(t, srv, tc.kind, faultReplicaN, func(i int) Config {
				cfg := faultConfig(policy)
				cfg.OnStorageError = hooks[i].record
				return cfg
			})

			load := faultStartLoad(replicas, policy, 4*faultReplicaN)
			faultWaitFor(t, "the load to run", func() bool { return load.sent.Load() >= 300 })
			srv.Stop()
			killed := time.Now()
			time.Sleep(300 * time.Millisecond) // the outage
			srv.Restart()
			restarted := time.Now()
			time.Sleep(1500 * time.Millisecond) // the load goes on
			statuses := load.finish()

			t.Logf("%d requests, statuses %v, slowest %v", load.sent.Load(), statuses, load.slowest)
			allowed := []int{fiber.StatusOK, fiber.StatusTooManyRequests}
			if policy == FailClosed {
				allowed = append(allowed, fiber.StatusServiceUnavailable)
			}
			for status := range statuses {
				require.Contains(t, allowed, status)
			}
			require.Positive(t, statuses[fiber.StatusOK])
			for i, h := range hooks {
				require.NotEmpty(t, h.calls(), "replica %d's hook never heard of the outage", i)
			}
			if policy != FailFallback {
				// Only logged: under load a request is also answered by the
				// policy when its Redis call runs late, which says more of the
				// machine than of the limiter; the recovery bound is asserted
				// by TestFaultKilledThenRestarted and TestFaultPaused.
				last := time.Unix(0, load.lastDegraded.Load())
				require.True(t, last.After(killed), "no request was answered by %v during the outage", policy)
				t.Logf("last request answered by %v started %v after the restart", policy, last.Sub(restarted))
			}
			faultRequireExact(t, replicas, "after")
		})
	}
}

// While Redis is paused (CLIENT PAUSE ALL), the first BreakerFailures
// requests of a replica wait at most StorageTimeout; once its breaker is
// open, requests no longer wait on Redis at all: over 2000 requests the
// p99 of the whole handler call is below faultOpenP99, and each policy answers as
// it promises. When the pause ends every replica decides in Redis again
// within a second, and a fresh key is exact. With go-redis defaults the
// store call runs on a goroutine of its own that outlives the request;
// with ContextTimeoutEnabled the client returns at the deadline itself.
func TestFaultPaused(t *testing.T) {
	cases := []faultCase{
		{FailFallback, faultGoRedis},
		{FailOpen, faultGoRedis},
		{FailClosed, faultGoRedis},
		{FailFallback, faultGoRedisCtx},
		{FailFallback, faultGoRedisUnpipelined},
	}
	for _, tc := range cases {
		t.Run(tc.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			replicas := faultReplicas(t, srv, tc.kind, faultReplicaN, func(int) Config { return faultConfig(tc.policy) })
			for i, r := range faultSend(replicas, faultSame("warm"), 1) { // connected, script loaded
				require.Equal(t, fiber.StatusOK, r[0].status, "replica %d", i)
			}

			ctx := context.Background()
			require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", faultPause.Milliseconds(), "ALL").Err())
			paused := time.Now()
			// Registered after the clients' Close, so it runs before them.
			t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() })

			// Trip the breakers: each of these waits for the timeout.
			trips := faultSendConcurrently(replicas, faultPerReplica("trip"), ConfigDefault.BreakerFailures)
			var tripTook []time.Duration
			for _, resps := range trips {
				faultCheckDegraded(t, tc.policy, resps)
				for _, r := range resps {
					require.GreaterOrEqual(t, r.took, ConfigDefault.StorageTimeout, "a request waited less than StorageTimeout on a paused Redis")
					tripTook = append(tripTook, r.took)
				}
			}

			// The breakers are open: the policy answers at once.
			const sent = 30
			admitted := make([]int, len(replicas))
			for i, resps := range faultSend(replicas, faultPerReplica("paused"), sent) {
				admitted[i] = faultCheckDegraded(t, tc.policy, resps)
				require.Equal(t, faultWantAdmitted(tc.policy, sent), admitted[i], "replica %d", i)
			}
			p50, p99, maxd := faultTimeOpenBreaker(t, replicas, tc.policy)
			require.Less(t, time.Since(paused), faultPause, "the paused phase outlasted the pause; raise faultPause")
			t.Logf("paused: first %d requests per replica took %v..%v; admitted %v of %d per replica; then %d requests: p50 %v, p99 %v, max %v",
				ConfigDefault.BreakerFailures, slices.Min(tripTook), slices.Max(tripTook), admitted, sent, faultTimed, p50, p99, maxd)

			// With ALL, Redis postpones UNPAUSE too: it returns when the pause ends.
			require.NoError(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
			recovery := faultAwaitRecovery(t, replicas, tc.policy, faultPerReplica("paused"), time.Now())
			t.Logf("decisions from Redis again after %v", recovery)
			faultRequireExact(t, replicas, "after")
		})
	}
}

// faultTimed is how many requests faultTimeOpenBreaker times.
const faultTimed = 2000

// faultTimeOpenBreaker times faultTimed requests spread over the replicas,
// whose breakers are open, checks that the policy answered them, and
// requires a p99 under faultOpenP99. It returns p50, p99 and the longest.
func faultTimeOpenBreaker(t *testing.T, replicas []fasthttp.RequestHandler, policy FailurePolicy) (p50, p99, maxd time.Duration) {
	t.Helper()
	took := make([]time.Duration, 0, faultTimed)
	resps := make([]faultResp, 0, faultTimed)
	for n := range faultTimed {
		r := faultGet(replicas[n%len(replicas)], "timed")
		resps = append(resps, r)
		took = append(took, r.took)
	}
	faultCheckDegraded(t, policy, resps)
	p50, p99, maxd = faultQuantiles(took)
	require.Less(t, p99, faultOpenP99, "p99 of a request with the breaker open")
	return p50, p99, maxd
}

// SCRIPT FLUSH in a loop during load is not a storage failure: the store
// reloads the script with EVAL, no failure reaches OnStorageError, and
// every key is admitted exactly Max times across the replicas.
func TestFaultScriptFlush(t *testing.T) {
	for _, tc := range faultEveryPolicyBothWays() {
		policy := tc.policy
		t.Run(tc.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			var hookCalls atomic.Int64
			replicas := faultReplicas(t, srv, tc.kind, faultReplicaN, func(int) Config {
				cfg := faultConfig(policy)
				cfg.StorageTimeout = faultCallsTimeout
				cfg.OnStorageError = func(error) { hookCalls.Add(1) }
				return cfg
			})
			faultRequireExact(t, replicas, "warm")
			ctx := context.Background()
			require.NoError(t, admin.ConfigResetStat(ctx).Err())

			var stop atomic.Bool
			var flushes atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				for !stop.Load() {
					if admin.ScriptFlush(ctx).Err() == nil {
						flushes.Add(1)
					}
					time.Sleep(time.Millisecond) // pacing, so that scripts run between flushes
				}
			}()
			for k := range 20 {
				faultRequireExact(t, replicas, "flush-"+strconv.Itoa(k))
			}
			stop.Store(true)
			<-done

			evals := redistest.CommandCalls(t, admin, "eval")
			t.Logf("%d flushes, %d EVAL reloads, %d EVALSHA, hook calls %d",
				flushes.Load(), evals, redistest.CommandCalls(t, admin, "evalsha"), hookCalls.Load())
			require.Positive(t, flushes.Load())
			require.Positive(t, evals, "no request found its script flushed")
			require.Zero(t, hookCalls.Load(), "a flushed script reached OnStorageError")
		})
	}
}

// OnStorageError hears of a Redis outage at once, with a *StorageError,
// and then at most once a second with the failures in between counted, not
// once per failure: with the breaker kept shut (BreakerFailures of a
// million), every request of a 1.5 s outage fails on Redis, over a hundred
// per replica, and each replica's hook is called once or twice.
func TestFaultHookIsRateLimited(t *testing.T) {
	for _, kind := range faultBothWays {
		t.Run(kind.String(), func(t *testing.T) { faultHookIsRateLimited(t, kind) })
	}
}

func faultHookIsRateLimited(t *testing.T, kind faultClient) {
	srv := redistest.Start(t)
	hooks := faultHooks(faultReplicaN)
	replicas := faultReplicas(t, srv, kind, faultReplicaN, func(i int) Config {
		cfg := faultConfig(FailFallback)
		cfg.BreakerFailures = 1_000_000
		cfg.OnStorageError = hooks[i].record
		return cfg
	})
	for i, r := range faultSend(replicas, faultSame("up"), 1) {
		require.Equal(t, fiber.StatusOK, r[0].status, "replica %d", i)
		require.Empty(t, hooks[i].calls(), "replica %d: the hook was called with Redis up", i)
	}

	srv.Stop()
	const outage, senders = 1500 * time.Millisecond, 8
	failed := make([]atomic.Int64, len(replicas))
	start := time.Now()
	faultEach(replicas, func(i int, h fasthttp.RequestHandler) {
		var wg sync.WaitGroup
		for range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; time.Since(start) < outage; n++ {
					r := faultGet(h, "hook-"+strconv.Itoa(n))
					if !assert.Contains(t, []int{fiber.StatusOK, fiber.StatusTooManyRequests}, r.status) {
						return
					}
					failed[i].Add(1)
				}
			}()
		}
		wg.Wait()
	})
	// The last failure came before now: a report at once, then one a
	// second at most, fit 1 + span/1s reports (2 when the machine keeps
	// up; a loaded one stretches the last requests past 2 s).
	span := time.Since(start)

	for i, h := range hooks {
		calls := h.calls()
		require.NotEmpty(t, calls, "replica %d: the hook never heard of the outage", i)
		var failures []int
		sum := 0
		for _, err := range calls {
			var se *StorageError
			require.True(t, errors.As(err, &se), "replica %d: the hook got %T, want *StorageError", i, err)
			require.GreaterOrEqual(t, se.Failures, 1)
			require.Error(t, se.Err)
			failures = append(failures, se.Failures)
			sum += se.Failures
		}
		n := int(failed[i].Load())
		t.Logf("replica %d: %d requests failed on Redis, hook called %d times with Failures %v; first: %v",
			i, n, len(calls), failures, calls[0])
		require.LessOrEqual(t, len(calls), 1+int(span/time.Second), "replica %d: at most one report at once and one a second after, over %v", i, span)
		require.LessOrEqual(t, sum, n, "replica %d: more failures reported than requests", i)
		require.GreaterOrEqual(t, n, 10*len(calls), "replica %d: too few failed requests to tell", i)
	}
}

// The deny cache keeps a flood on an exhausted key off Redis: after Max 5
// per minute is used up, 10,000 requests from 32 goroutines are all
// rejected, while Redis decides at most one per replica for each request
// already in flight when the first rejection came back (at most
// replicas×32), where without the cache it decides all 10,000. Who decided
// is what OnDecision reports.
func TestFaultDenyCacheSparesRedis(t *testing.T) {
	const max, flood, callers, slack = 5, 10_000, 32, 4
	for _, kind := range faultBothWays {
		for _, replicaN := range []int{1, faultReplicaN} {
			for _, disabled := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/replicas=%d/DisableDenyCache=%v", kind, replicaN, disabled), func(t *testing.T) {
					srv := redistest.Start(t)
					var fromRedis, fromCache atomic.Int64
					counting := atomic.Bool{}
					replicas := faultReplicas(t, srv, kind, replicaN, func(int) Config {
						return Config{Max: max, Expiration: time.Minute, StorageTimeout: faultCallsTimeout, DisableDenyCache: disabled,
							OnDecision: func(_ *fiber.Ctx, e DecisionEvent) {
								if !counting.Load() {
									return
								}
								switch e.Source {
								case SourceBackend:
									fromRedis.Add(1)
								case SourceDenyCache:
									fromCache.Add(1)
								}
							}}
					})
					require.Equal(t, max, hammer(t, replicas, "hot", max, 1))
					counting.Store(true)
					require.Zero(t, hammer(t, replicas, "hot", flood, callers), "a request on the exhausted key was admitted")
					t.Logf("%d replica(s), deny cache disabled %v: Redis decided %d of %d requests, the cache %d", replicaN, disabled, fromRedis.Load(), flood, fromCache.Load())
					require.Equal(t, int64(flood), fromRedis.Load()+fromCache.Load(), "requests answered by neither")
					if disabled {
						require.Equal(t, int64(flood), fromRedis.Load())
					} else {
						require.LessOrEqual(t, fromRedis.Load(), int64(replicaN*callers+slack))
					}
				})
			}
		}
	}
}

// faultPanicHook makes a go-redis client panic in every command while on.
type faultPanicHook struct{ on *atomic.Bool }

func (h faultPanicHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h faultPanicHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.on.Load() {
			panic("hook bug")
		}
		return next(ctx, cmd)
	}
}

func (h faultPanicHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// With ContextTimeoutEnabled the store call runs on the request's own
// goroutine; a panic there (here in a go-redis hook, such as a tracing
// hook with a bug) is a storage failure too: the policy answers, and the
// next call, once the hook behaves, is decided in Redis.
func TestFaultPanicOnTheRequestGoroutine(t *testing.T) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	var on atomic.Bool
	client.AddHook(faultPanicHook{&on})
	app := newApp(Config{Max: 5, Storage: redis.New(client), FailurePolicy: FailClosed}, nil, nil)
	on.Store(true)
	for range 3 {
		require.Equal(t, fiber.StatusServiceUnavailable, get(t, app, "/", "").StatusCode)
	}
	on.Store(false)
	resp := get(t, app, "/", "")
	require.Equal(t, fiber.StatusOK, resp.StatusCode)
	require.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"), "decided in Redis")
}

// A long outage: once a go-redis pool has failed to dial PoolSize times it
// answers every call with its last dial error, after its own retries and
// backoff (tens of ms). Those errors say Redis is out of reach, so the
// breaker stays open through them and requests keep not waiting: p99 under faultOpenP99
// seconds into the outage, with probes in the background.
func TestFaultLongOutage(t *testing.T) {
	for _, kind := range faultBothWays {
		t.Run(kind.String(), func(t *testing.T) { faultLongOutage(t, kind) })
	}
}

func faultLongOutage(t *testing.T, kind faultClient) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 1})
	t.Cleanup(func() { _ = client.Close() })
	var opts []redis.Option
	if kind == faultGoRedisUnpipelined {
		opts = append(opts, redis.WithoutPipelining())
	}
	app := replicaHandler(Config{Max: faultMax, Expiration: faultExpiration, Storage: redis.New(client, opts...)})
	require.Equal(t, fiber.StatusOK, faultGet(app, "warm").status)
	srv.Stop()
	// Past a few cool-downs, with enough failed dials to put the pool into
	// its refusing state.
	deadline := time.Now().Add(3 * ConfigDefault.BreakerCooldown)
	for time.Now().Before(deadline) {
		faultGet(app, "outage")
		time.Sleep(5 * time.Millisecond)
	}
	took := make([]time.Duration, 0, faultTimed)
	for range faultTimed {
		r := faultGet(app, "timed")
		require.Contains(t, []int{fiber.StatusOK, fiber.StatusTooManyRequests}, r.status)
		took = append(took, r.took)
		time.Sleep(100 * time.Microsecond) // spread over more than one cool-down's probes
	}
	p50, p99, maxd := faultQuantiles(took)
	t.Logf("long outage: %d requests: p50 %v, p99 %v, max %v", faultTimed, p50, p99, maxd)
	require.Less(t, p99, faultOpenP99)

	// Redis back: the pool's background dial (once a second) succeeds and
	// ends, and so does the outage for the limiter.
	srv.Restart()
	restarted := time.Now()
	faultWaitFor(t, "the pool to dial again", func() bool { return client.Ping(context.Background()).Err() == nil })
	// The key "outage" is exhausted in the fallback; the fresh Redis admits it.
	faultWaitFor(t, "a decision in Redis", func() bool { return faultGet(app, "outage").status == fiber.StatusOK })
	t.Logf("decisions from Redis again %v after the restart", time.Since(restarted))
}
