package limiter

// Several Limits on Redis: exact across replicas and on a cluster.

import (
	"context"
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

// commandStat is one command's line of INFO commandstats.
type commandStat struct{ calls, failed int }

// limitsCommandStats reads INFO commandstats of the server admin talks to:
// calls and failed calls by command name (lower case, subcommands as
// "config|resetstat"). Redis counts the commands a script makes too: an
// EVALSHA that reads and writes its key adds one "get" and one "set" (one each per key, for a batch).
func limitsCommandStats(t *testing.T, admin *goredis.Client) map[string]commandStat {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s commandStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls", "failed_calls":
				n, err := strconv.Atoi(v)
				require.NoError(t, err, "commandstats line %q", line)
				if k == "calls" {
					s.calls = n
				} else {
					s.failed = n
				}
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return stats
}

// limitsRun is what hammerUntil saw.
type limitsRun struct {
	sent, admitted int
	// lastAdmit is the time from the start of the run to the answer of its
	// last admitted request.
	lastAdmit time.Duration
	elapsed   time.Duration
}

// hammerUntil sends requests for key from callers goroutines, spread over
// the replicas, each goroutine pausing pause between its requests, until
// at least minRun has passed and want requests were admitted, or maxRun
// has passed, or maxRequests were sent. Any status but 200 and 429 fails
// the test.
func hammerUntil(t *testing.T, replicas []fasthttp.RequestHandler, key string, callers, want, maxRequests int,
	pause, minRun, maxRun time.Duration,
) limitsRun {
	t.Helper()
	var sent, admitted, lastAdmit atomic.Int64
	var stop atomic.Bool
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := sent.Add(1) - 1
				if i >= int64(maxRequests) {
					sent.Add(-1)
					stop.Store(true)
					return
				}
				switch code, body := serveKeyed(replicas[i%int64(len(replicas))], key); code {
				case fiber.StatusOK:
					admitted.Add(1)
					at := int64(time.Since(start))
					for {
						old := lastAdmit.Load()
						if at <= old || lastAdmit.CompareAndSwap(old, at) {
							break
						}
					}
				case fiber.StatusTooManyRequests:
				default:
					t.Errorf("status %d: %s", code, body)
					stop.Store(true)
					return
				}
				if d := time.Since(start); d >= maxRun || d >= minRun && admitted.Load() >= int64(want) {
					stop.Store(true)
				}
				time.Sleep(pause)
			}
		}()
	}
	wg.Wait()
	return limitsRun{
		sent: int(sent.Load()), admitted: int(admitted.Load()),
		lastAdmit: time.Duration(lastAdmit.Load()), elapsed: time.Since(start),
	}
}

// With two limits, 5 per second and 12 per hour, three replicas (each with
// its own client) hammering one key for 3.5 s admit exactly 12 in all, for
// every algorithm: the hourly limit holds across replicas although the
// per-second one refills several times. The per-second limit holds too:
// the 12th admission comes no sooner than it allows. Each decision that
// reaches Redis is one script call that finds its script loaded, and
// nothing writes but the scripts, once per admitted request: a rejection
// writes nothing.
func TestLimitsExactAcrossReplicas(t *testing.T) {
	const want = 12
	cases := []struct {
		name string
		mw   LimiterHandler
		// minSpread is the least time from the first admission to the 12th
		// that the 5-per-second limit allows.
		minSpread time.Duration
	}{
		// 5 + 5, then a third window, opening at least 2 s after the first.
		{"FixedWindow", FixedWindow{}, 2 * time.Second},
		// The second window admits at most 4 while the first one's count
		// still weighs (prev*(W-elapsed) > 0), so 10 or more need a third.
		{"SlidingWindow", SlidingWindow{}, 2 * time.Second},
		// 5 at once, then one token per 200 ms: 7 more take 1.4 s. The
		// hourly bucket refills a token per 300 s, none within the run.
		{"TokenBucket", TokenBucket{}, 1400 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			server := redistest.Start(t)
			admin := server.Client(t)
			ctx := context.Background()
			var replicas []fasthttp.RequestHandler
			for range 3 {
				client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 32})
				t.Cleanup(func() { _ = client.Close() })
				replicas = append(replicas, replicaHandler(strict(Config{
					Limits:  []Limit{{Max: 5, Expiration: time.Second}, {Max: want, Expiration: time.Hour}},
					Storage: redis.New(client), LimiterMiddleware: c.mw,
				})))
			}
			// A request of each replica on a key of its own loads the
			// script into Redis and opens a connection, so that what is
			// measured below is the decisions alone.
			for i := range replicas {
				require.Equal(t, 1, hammer(t, replicas[i:i+1], "warm-"+strconv.Itoa(i), 1, 1))
			}
			require.NoError(t, admin.ConfigResetStat(ctx).Err())

			// 16 callers, each pausing 2 ms between requests: up to about
			// 20,000 requests in 3.5 s, hundreds per refill of the
			// per-second limit (most of them rejected by the deny cache
			// without a call to Redis). On a machine too slow to reach a
			// third per-second window in 3.5 s the run goes on up to 20 s.
			run := hammerUntil(t, replicas, "both", 16, want, 40_000, 2*time.Millisecond, 3500*time.Millisecond, 20*time.Second)
			stats := limitsCommandStats(t, admin)
			t.Logf("%d requests in %v, %d admitted, the last %v after the start; commandstats %v",
				run.sent, run.elapsed.Round(time.Millisecond), run.admitted, run.lastAdmit.Round(time.Millisecond), stats)

			require.Equal(t, want, run.admitted, "admitted in %v", run.elapsed)
			// The run starts before the first admission and the 12th ends
			// after Redis admitted it; 10 ms cover Redis's whole-ms time.
			assert.GreaterOrEqual(t, run.lastAdmit, c.minSpread-10*time.Millisecond,
				"the 12th admission came sooner than 5 per second allows")

			// A script call decides one request, or as a batch several. The
			// batch script is loaded by the first batch of each replica
			// that finds it missing (NOSCRIPT, then EVAL).
			scripts := stats["evalsha"].calls - stats["evalsha"].failed + stats["eval"].calls
			assert.Positive(t, scripts)
			assert.LessOrEqual(t, stats["evalsha"].failed, len(replicas), "NOSCRIPT beyond each replica's first batch")
			assert.LessOrEqual(t, stats["eval"].calls, len(replicas), "a script was sent whole though Redis had it")
			// Commands made inside scripts are counted too: each decision
			// reads its one key once, and each script call asks for the
			// time once, so a GET or TIME of anyone else would show here.
			decisions := stats["get"].calls
			assert.GreaterOrEqual(t, decisions, scripts)
			assert.LessOrEqual(t, decisions, run.sent, "GET calls besides the scripts' own")
			assert.Equal(t, scripts, stats["time"].calls, "TIME calls besides the scripts' own")
			// One write per key per script call, however many of the
			// call's decisions counted: at most one per admitted request.
			assert.Positive(t, stats["set"].calls)
			assert.LessOrEqual(t, stats["set"].calls, want, "writes besides one per admitted request")
			for name := range stats {
				assert.Contains(t, []string{
					"evalsha", "eval", "get", "set", "time", // the scripts and what they call
					"ping",                    // first in each pipeline of several calls
					"hello", "client|setinfo", // connections go-redis opens
					"info", "config|resetstat", // this test's own
				}, name, "unexpected command %s in commandstats", name)
			}
		})
	}
}

// On a Redis Cluster of 3 masters, a limiter with two limits (3 per minute,
// 5 per hour) keeps each client key's state in one Redis key, and the
// client keys spread over every master; each key, hammered concurrently
// from three replicas with a ClusterClient each, is admitted exactly 3
// times (within a minute, the per-minute limit decides: timing cannot
// matter), with no cluster error (CROSSSLOT, MOVED) reaching a client, at
// most one script call per decision, and at most one write per admitted request.
func TestLimitsOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	const keys, perKey, want = 300, 12, 3
	ctx := context.Background()
	var admins []*goredis.Client
	for _, m := range cluster.Masters {
		admins = append(admins, m.Client(t))
	}
	cases := []struct {
		name   string
		mw     LimiterHandler
		tag    string        // the algorithm's tag in keys
		maxTTL time.Duration // what the longest limit's state needs
	}{
		{"FixedWindow", FixedWindow{}, "fw", time.Hour},
		{"SlidingWindow", SlidingWindow{}, "sw", 2 * time.Hour}, // two windows
		{"TokenBucket", TokenBucket{}, "tb", time.Hour},         // a full refill
		{"SlidingLog", SlidingLog{}, "sl", time.Hour},           // the newest entry leaves
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keyPrefix := "limits-cluster-" + c.tag + ":"
			var replicas []fasthttp.RequestHandler
			for range 3 {
				replicas = append(replicas, replicaHandler(strict(Config{
					Limits:  []Limit{{Max: want, Expiration: time.Minute}, {Max: 5, Expiration: time.Hour}},
					Storage: redis.New(cluster.Client(t)), LimiterMiddleware: c.mw, KeyPrefix: keyPrefix,
				})))
			}
			for _, a := range admins {
				require.NoError(t, a.ConfigResetStat(ctx).Err())
			}
			// Keys decided concurrently, so that pipelines carry keys of
			// every master.
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; i < keys; i += 16 {
						assert.Equal(t, want, hammer(t, replicas, "k"+strconv.Itoa(i), perKey, 4), "key k%d", i)
					}
				}()
			}
			wg.Wait()

			// Where the limiter's keys are: one per client key, named by
			// the limiter's identity, on every master.
			stored := map[string]bool{}
			scripts, sets := 0, 0
			for i, a := range admins {
				found, err := a.Keys(ctx, keyPrefix+"*").Result()
				require.NoError(t, err)
				assert.Greater(t, len(found), keys/6, "master %d holds %d of the %d keys", i, len(found), keys)
				for _, k := range found {
					stored[k] = true
					ttl, err := a.PTTL(ctx, k).Result()
					require.NoError(t, err)
					assert.True(t, ttl > 0 && ttl <= c.maxTTL, "key %s has TTL %v", k, ttl)
				}
				stats := limitsCommandStats(t, a)
				scripts += stats["evalsha"].calls - stats["evalsha"].failed + stats["eval"].calls - stats["eval"].failed
				sets += stats["set"].calls
			}
			wantKeys := map[string]bool{}
			for i := range keys {
				wantKeys[keyPrefix+"replica:"+c.tag+":1m+1h:k"+strconv.Itoa(i)] = true
			}
			assert.Equal(t, wantKeys, stored)
			t.Logf("%d decisions, %d script calls, %d SETs", keys*perKey, scripts, sets)
			assert.Positive(t, scripts)
			assert.LessOrEqual(t, scripts, keys*perKey, "more script calls than decisions")
			// One write per key per script call, however many of the
			// call's decisions counted: each key at least once, and at
			// most once per admitted request.
			assert.GreaterOrEqual(t, sets, keys)
			assert.LessOrEqual(t, sets, keys*want, "writes besides one per admitted request")
		})
	}
}
