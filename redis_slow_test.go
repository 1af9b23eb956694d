package limiter

import (
	"context"
	"fmt"
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

// A slow Redis is not an absent one: these tests show that a decision
// whose Redis call ran out of time is not admitted by the per-replica
// fallback while the breaker is closed, that timeouts amid answers do not
// open the breaker, and that the sliding log's largest value keeps a call
// cheap enough that a hot key does not queue past StorageTimeout.

// slowLogLimits are SlidingLog limits at the log's documented maximum:
// MaxLogLimit entries a key in all, over the most limits a limiter takes
// (which costs Redis more per call than one limit of MaxLogLimit).
var slowLogLimits = []Limit{
	{Max: quota.MaxLogLimit / 4, Expiration: time.Hour},
	{Max: quota.MaxLogLimit / 4, Expiration: 2 * time.Hour},
	{Max: quota.MaxLogLimit / 4, Expiration: 3 * time.Hour},
	{Max: quota.MaxLogLimit / 4, Expiration: 4 * time.Hour},
}

// Three replicas, each with its own client, under the default
// FailurePolicy and StorageTimeout, hammer one key of a SlidingLog at its
// maximum from 32 callers with twice the limit: no more than the limit is
// admitted across them. A call that runs late is rejected, not admitted by
// a replica's fallback (which would admit beyond what Redis counts). The
// breakers are kept closed (BreakerFailures of a million): a loaded
// machine's stall, in which Redis answers nothing for StorageTimeout,
// would otherwise open them, and the fallback's admissions then, which
// FailFallback promises, could not be told by their latency from those of
// calls that ran late (a stalled decision takes as long). So every answer
// of the fallback here is one to a call that failed, and must be a
// rejection.
func TestSlidingLogAtItsMaximumUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	limit := slowLogLimits[0].Max
	const callers, runs = 32, 4
	var timedOutAdmitted, timedOutRejected atomic.Int64
	var replicas []fasthttp.RequestHandler
	for range 3 {
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		replicas = append(replicas, replicaHandler(Config{
			Limits: slowLogLimits, LimiterMiddleware: SlidingLog{}, Storage: redis.New(client),
			BreakerFailures: 1_000_000, OnStorageError: func(error) {},
			OnDecision: func(_ *fiber.Ctx, e DecisionEvent) {
				switch {
				case e.Source != SourceFallback:
				case e.Allowed:
					timedOutAdmitted.Add(1)
				default:
					timedOutRejected.Add(1)
				}
			},
		}))
	}
	// Until a replica's first answer from Redis, a call that times out
	// cannot tell a slow Redis from an absent one: the fallback decides it.
	for i, r := range replicas {
		faultWaitFor(t, "replica "+strconv.Itoa(i)+"'s first answer from Redis", func() bool {
			timedOutRejected.Store(0)
			timedOutAdmitted.Store(0)
			code, _ := serveKeyed(r, "warm")
			return code == fiber.StatusOK && timedOutAdmitted.Load()+timedOutRejected.Load() == 0
		})
	}
	for run := range runs {
		require.NoError(t, admin.ConfigResetStat(context.Background()).Err())
		timedOutAdmitted.Store(0)
		timedOutRejected.Store(0)
		start := time.Now()
		admitted := hammer(t, replicas, "log-"+strconv.Itoa(run), 2*limit, callers)
		calls, usec := redistest.CommandStats(t, admin)
		t.Logf("run %d: admitted %d of %d in %v; timed out: %d rejected, %d admitted; %d EVALSHA, %.3f ms of Redis CPU a call",
			run, admitted, limit, time.Since(start), timedOutRejected.Load(), timedOutAdmitted.Load(),
			calls["evalsha"], float64(usec["evalsha"])/float64(max(1, calls["evalsha"]))/1000)
		assert.Zero(t, timedOutAdmitted.Load(), "run %d: the fallback admitted a call that failed", run)
		assert.LessOrEqual(t, admitted, limit, "run %d", run)
	}
}

// A SlidingLog key keeps at most MaxLogLimit entries in all: Limits whose
// Max add up to more are refused at New, as a single Max above it is.
func TestSlidingLogEntriesAreCapped(t *testing.T) {
	New(Config{Limits: slowLogLimits, LimiterMiddleware: SlidingLog{}})
	New(Config{Max: quota.MaxLogLimit, LimiterMiddleware: SlidingLog{}})
	for _, tc := range []struct {
		limits []Limit
		want   string
	}{
		{[]Limit{{Max: 1, Expiration: time.Second}, {Max: quota.MaxLogLimit, Expiration: time.Hour}}, "add up to 10001"},
		{[]Limit{ // the documented maximum before the cap
			{Max: quota.MaxLogLimit, Expiration: time.Hour}, {Max: quota.MaxLogLimit, Expiration: 2 * time.Hour},
			{Max: quota.MaxLogLimit, Expiration: 3 * time.Hour}, {Max: quota.MaxLogLimit, Expiration: 4 * time.Hour},
		}, "add up to 40000"},
	} {
		func() {
			defer func() {
				r := recover()
				require.NotNil(t, r, "New did not panic")
				assert.Contains(t, fmt.Sprint(r), "limiter: the Max of Limits "+tc.want+"; SlidingLog keeps one entry per unit of Max and a key at most 10000 in all")
			}()
			New(Config{Limits: tc.limits, LimiterMiddleware: SlidingLog{}})
		}()
	}
}

// While Redis holds every script (CLIENT PAUSE WRITE) and the breaker is
// still closed, the decisions that time out are rejected (429, Remaining
// 0, Retry-After 1), not admitted by the replica's fallback, which knows
// neither what Redis holds for the key nor whether it will still run the
// scripts it was sent. Once the breaker has opened, the fallback decides
// as FailFallback promises.
func TestTimedOutDecisionIsNotTheFallbacks(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	var fromFallback, fromRedis atomic.Int64
	replica := replicaHandler(Config{
		Max: faultMax, Expiration: time.Hour, Storage: redis.New(srv.Client(t)),
		OnDecision: func(_ *fiber.Ctx, e DecisionEvent) {
			switch e.Source {
			case SourceFallback:
				fromFallback.Add(1)
			case SourceBackend:
				fromRedis.Add(1)
			}
		},
	})
	require.Equal(t, fiber.StatusOK, faultGet(replica, "k").status)

	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", faultPause.Milliseconds(), "WRITE").Err())
	t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() })
	paused := time.Now()
	trips := faultSendConcurrently([]fasthttp.RequestHandler{replica}, faultSame("k"), ConfigDefault.BreakerFailures)[0]
	for n, r := range trips {
		require.GreaterOrEqual(t, r.took, ConfigDefault.StorageTimeout, "request %d did not wait on Redis", n)
		assert.Equal(t, fiber.StatusTooManyRequests, r.status, "request %d: timed out with the breaker closed", n)
		assert.Equal(t, "0", r.remaining, "request %d", n)
		assert.Equal(t, "1", r.retryAfter, "request %d", n)
	}
	require.Equal(t, int64(ConfigDefault.BreakerFailures), fromFallback.Load())

	// The breaker is open (no call was answered): the fallback decides.
	r := faultGet(replica, "k")
	require.Less(t, r.took, ConfigDefault.StorageTimeout)
	assert.Equal(t, fiber.StatusOK, r.status, "the fallback, once the breaker is open")
	assert.Equal(t, strconv.Itoa(faultMax-1), r.remaining, "the fallback's own count")
	require.Less(t, time.Since(paused), faultPause, "the paused phase outlasted the pause; raise faultPause")

	require.NoError(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
	fromRedis.Store(0)
	faultWaitFor(t, "a decision in Redis", func() bool {
		r = faultGet(replica, "k2")
		return fromRedis.Load() > 0
	})
	// Redis 7 drops a paused client's held command when the client
	// closes the connection, as go-redis does at a read timeout; a busy
	// Redis runs what it has read.
	fromRedis.Store(0)
	r = faultGet(replica, "k")
	require.Equal(t, int64(1), fromRedis.Load())
	t.Logf("after the pause, Redis has k's Remaining at %s", r.remaining)
}

// Timeouts of one key while the store answers other keys in time do not
// open the breaker: the store is slow, not out of reach, and the breaker's
// fallback would decide every key without it. Here a fiber.Storage hangs
// one key's calls; three of them time out in a row (BreakerFailures 2)
// after other keys were answered while they waited, and the store still
// decides the other keys.
func TestTimeoutsAmidAnswersKeepTheBreakerClosed(t *testing.T) {
	store := newFlakyStorage(t)
	store.hangKey = "limiter::fw:1m:hang"
	const timeout = 300 * time.Millisecond
	app := newApp(Config{
		Max: 100, Storage: store, KeyGenerator: headerKey, StorageTimeout: timeout, BreakerFailures: 2,
	}, nil, nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(t, app, "/", "hang")
		}()
	}
	time.Sleep(10 * time.Millisecond) // the hung calls have begun
	for i := range 8 {
		get(t, app, "/", "other-"+strconv.Itoa(i))
	}
	wg.Wait()
	// A key that the store answered (one sharing the hung key's lock was
	// not) is decided by the store again, not by a fresh fallback.
	answered := 0
	for i := range 8 {
		key := "other-" + strconv.Itoa(i)
		if v, _ := store.mapStorage.Get("limiter::fw:1m:" + key); v == nil {
			continue
		}
		answered++
		assert.Equal(t, "98", get(t, app, "/", key).Header.Get("X-RateLimit-Remaining"), "key %s: the store's count", key)
	}
	require.Positive(t, answered)
	store.unhang()
}
