package limiter

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// Helpers of the tests that fail a real Redis under the limiter
// (redis_outage_test.go, redis_misconfigured_test.go, redis_slow_test.go,
// deny_cache_test.go): redis-server processes killed, restarted, paused
// and flushed under it, for each FailurePolicy. A test runs three
// replicas: three Fiber apps, each with its own go-redis client and its
// own limiter, keyed by X-Key, on one redis-server of the subtest's own,
// so that a kill cannot leak into another subtest. Every rule is faultMax
// per faultExpiration, long enough that nothing refills during a test.

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
// replicas is admitted exactly faultMax times, every decision made in
// Redis: every replica decides in Redis. On a loaded machine a call may
// still run out of StorageTimeout, and the policy then answers it as it
// promises (FailOpen admits it uncounted, FailClosed answers 503, a stall
// in which every call times out opens FailFallback's breaker): such an
// attempt, told by policyAnswered, is logged and tried again with another
// fresh key a cool-down later, up to faultExactTries times.
func faultRequireExact(t *testing.T, replicas []fasthttp.RequestHandler, key string) {
	t.Helper()
	for try := 1; ; try++ {
		fresh := key + "-" + strconv.Itoa(try)
		admitted, byPolicy := hammerCounted(t, replicas, fresh, 10*faultMax, 4*len(replicas), true)
		if byPolicy == 0 {
			require.Equal(t, faultMax, admitted, "fresh key %q", fresh)
			return
		}
		t.Logf("fresh key %q: the policy answered %d of %d requests (calls that ran out of StorageTimeout), %d admitted", fresh, byPolicy, 10*faultMax, admitted)
		require.Less(t, try, faultExactTries, "fresh key %q: the policy still answered %d requests after %d tries", fresh, byPolicy, try)
		time.Sleep(2 * ConfigDefault.BreakerCooldown)
	}
}

// faultExactTries is how many fresh keys faultRequireExact tries.
const faultExactTries = 3

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

// reset forgets the calls so far.
func (h *faultHook) reset() {
	h.mu.Lock()
	h.errs = nil
	h.mu.Unlock()
}

// faultOnlyTimeouts reports whether errs are calls of the hook, each about
// a call that ran out of StorageTimeout.
func faultOnlyTimeouts(errs []error) bool {
	for _, err := range errs {
		if !errors.Is(err, ErrStorageTimeout) {
			return false
		}
	}
	return len(errs) > 0
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

// faultWarmReplica builds one FailFallback replica on srv with a Storage of
// kind, a hook and a StorageTimeout of faultCallsTimeout, and sends it a
// first request ("warm": connected, script loaded). Its tests count what
// reaches Redis and compare counts: a loaded machine's stall must not turn
// a call to a Redis that answers into the fallback's decision.
func faultWarmReplica(t *testing.T, srv *redistest.Server, kind faultClient) ([]fasthttp.RequestHandler, *faultHook) {
	t.Helper()
	return faultWarmReplicaTimed(t, srv, kind, faultCallsTimeout)
}

// faultWarmReplicaTimed is faultWarmReplica with a StorageTimeout of
// timeout, for the tests about what a call that runs out of it reports.
func faultWarmReplicaTimed(t *testing.T, srv *redistest.Server, kind faultClient, timeout time.Duration) ([]fasthttp.RequestHandler, *faultHook) {
	t.Helper()
	hook := &faultHook{}
	replicas := faultReplicas(t, srv, kind, 1, func(int) Config {
		cfg := faultConfig(FailFallback)
		cfg.StorageTimeout = timeout
		cfg.OnStorageError = hook.record
		return cfg
	})
	require.Equal(t, fiber.StatusOK, faultGet(replicas[0], "warm").status)
	return replicas, hook
}
