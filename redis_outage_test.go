package limiter

// A real Redis killed, restarted or paused under replicas: each FailurePolicy's answers, the recovery.

import (
	"context"
	"errors"
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
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

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
		// A loaded machine may hold a replica's first call (a dial, a
		// script load) past StorageTimeout, which the hook rightly hears
		// of: that replica tries again, once the report's second is over.
		for try := 0; try < 3 && faultOnlyTimeouts(hooks[i].calls()); try++ {
			time.Sleep(1100 * time.Millisecond)
			hooks[i].reset()
			require.Equal(t, fiber.StatusOK, faultGet(replicas[i], "up").status, "replica %d", i)
		}
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

// An idle replica whose breaker is open probes in the background: once
// Redis is back, the probe reaches it one cool-down later with no request
// to start it, and the first request after is decided in Redis.
func TestFaultIdleReplicaProbes(t *testing.T) {
	srv := redistest.Start(t)
	replicas := faultReplicas(t, srv, faultGoRedis, faultReplicaN, func(int) Config {
		cfg := faultConfig(FailFallback)
		cfg.StorageTimeout = time.Second // a loaded machine's slow probe still succeeds
		return cfg
	})
	for i, r := range faultSend(replicas, faultSame("warm"), 1) {
		require.Equal(t, fiber.StatusOK, r[0].status, "replica %d", i)
	}
	srv.Stop()
	faultSendConcurrently(replicas, faultPerReplica("trip"), ConfigDefault.BreakerFailures)
	srv.Restart()
	admin := srv.Client(t)
	back := time.Now()
	// Each replica has a client of its own: a connection of each whose
	// last command was the probe's script call, and whose probe has been
	// answered (none is left waiting on it).
	faultWaitFor(t, "a probe from every replica, answered", func() bool {
		list, err := admin.ClientList(context.Background()).Result()
		require.NoError(t, err)
		return strings.Count(list, "cmd=eval") >= faultReplicaN && !strings.Contains(list, "flags=b")
	})
	time.Sleep(20 * time.Millisecond) // the answers, read
	t.Logf("every replica probed within %v of Redis coming back", time.Since(back))
	// Each replica's fallback counted its trip key 5 times; the fresh Redis
	// has not counted it.
	for i, r := range faultSend(replicas, faultPerReplica("trip"), 1) {
		assert.Equal(t, strconv.Itoa(faultMax-1), r[0].remaining, "replica %d: decided in Redis", i)
	}
}

// Reports name what failed. Redis killed: the first report is a timeout
// (the first calls wait on go-redis's dials), and once the breaker's probe
// has run, the reports say the connection is refused. Redis paused: they
// say it takes connections but does not answer.
func TestFaultReportsNameTheCause(t *testing.T) {
	cases := []struct {
		name string
		down func(t *testing.T, srv *redistest.Server)
		want string
	}{
		{"killed", func(t *testing.T, srv *redistest.Server) { srv.Stop() }, "connection refused"},
		{"paused", func(t *testing.T, srv *redistest.Server) {
			admin := srv.Client(t)
			require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", 3000, "ALL").Err())
		}, "takes connections, but did not answer in time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			replicas, hook := faultWarmReplicaTimed(t, srv, faultGoRedis, ConfigDefault.StorageTimeout)
			tc.down(t, srv)
			start := time.Now()
			var found error
			for n := 0; found == nil && time.Since(start) < 2500*time.Millisecond; n++ {
				faultGet(replicas[0], "down-"+strconv.Itoa(n))
				for _, err := range hook.calls() {
					if strings.Contains(err.Error(), tc.want) {
						found = err
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			require.Error(t, found, "no report says %q: %v", tc.want, hook.calls())
			require.ErrorIs(t, found, ErrStorageTimeout)
			t.Logf("%v after the fault: %v", time.Since(start), found)
		})
	}
}
