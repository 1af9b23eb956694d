package limiter

import (
	"context"
	"errors"
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

// These tests run the limiter against a redis-server configured the ways
// operators get wrong: out of memory, refusing the client's credentials or
// database, holding writes; and against a go-redis client whose hook
// panics.

// faultScriptCalls is how many script calls Redis ran since its stats were
// last reset, failed ones included.
func faultScriptCalls(t *testing.T, admin *goredis.Client) int {
	t.Helper()
	return redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
}

// faultInfoInt reads a field of INFO section as a number.
func faultInfoInt(t *testing.T, admin *goredis.Client, section, field string) int {
	t.Helper()
	info, err := admin.Info(context.Background(), section).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, "INFO line %q", line)
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// A Redis at maxmemory under noeviction answers every write with OOM. That
// is the server out of service, not an answer about one key: the breaker
// opens after BreakerFailures script calls, further requests do not wait
// on Redis (a few probes at most reach it), FailFallback admits them, and
// the hook names the cause. Once memory is freed, the breaker's background
// probe finds Redis back without a request to start it.
func TestFaultOutOfMemory(t *testing.T) {
	for _, kind := range []faultClient{faultGoRedis, faultFiberStorage} {
		t.Run(kind.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			ctx := context.Background()
			replicas, hook := faultWarmReplica(t, srv, kind)

			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
			t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })
			require.NoError(t, admin.ConfigResetStat(ctx).Err())
			const sent = 60
			for n := range sent {
				r := faultGet(replicas[0], "oom-"+strconv.Itoa(n))
				require.Equal(t, fiber.StatusOK, r.status, "request %d", n)
			}
			calls := faultScriptCalls(t, admin)
			t.Logf("%d requests at OOM: %d script calls reached Redis", sent, calls)
			assert.GreaterOrEqual(t, calls, ConfigDefault.BreakerFailures)
			assert.LessOrEqual(t, calls, ConfigDefault.BreakerFailures+3, "requests kept going to a Redis out of memory")

			reports := hook.calls()
			require.NotEmpty(t, reports)
			last := reports[len(reports)-1]
			assert.Contains(t, last.Error(), "OOM")
			var se *StorageError
			require.ErrorAs(t, last, &se)

			// Freed: the background probe closes the breaker with no
			// request to start it.
			require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
			freed := time.Now()
			require.NoError(t, admin.ConfigResetStat(ctx).Err())
			faultWaitFor(t, "a probe", func() bool { return faultScriptCalls(t, admin) > 0 })
			t.Logf("probed %v after memory was freed", time.Since(freed))
			// The probe's script has run; its answer closes the breaker a
			// moment later (longer on a loaded machine): until a fresh key
			// reaches Redis, a request may still go to the fallback.
			check := 0
			faultWaitFor(t, "the breaker closed", func() bool {
				check++
				key := "oom-check-" + strconv.Itoa(check)
				faultGet(replicas[0], key)
				found, err := admin.Keys(ctx, "*"+key).Result()
				require.NoError(t, err)
				return len(found) > 0
			})
			r := faultGet(replicas[0], "oom-0") // the fallback admitted it once; Redis has not counted it
			assert.Equal(t, "9", r.remaining, "decided in Redis")
		})
	}
}

// A client whose connections Redis refuses while go-redis sets them up
// (a wrong password, none where one is required, a database that does not
// exist) gets the error on every call, and go-redis closes
// the connection: every call would dial again. Those errors count as
// Redis out of service: the breaker opens, FailFallback admits, and new
// connections stay a few per cool-down, not one per request, over 2 s of
// 8 busy callers.
func TestFaultCredentialsRefused(t *testing.T) {
	cases := []struct {
		name   string
		server []string
		client goredis.Options
		admin  goredis.Options
		want   string
	}{
		{"wrong password", []string{"--requirepass", "right"}, goredis.Options{Password: "wrong"}, goredis.Options{Password: "right"}, "WRONGPASS"},
		{"no password", []string{"--requirepass", "right"}, goredis.Options{}, goredis.Options{Password: "right"}, "NOAUTH"},
		{"DB 99", nil, goredis.Options{DB: 99}, goredis.Options{}, "DB index"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, tc.server...)
			adminOpts := tc.admin
			adminOpts.Addr = srv.Addr()
			admin := goredis.NewClient(&adminOpts)
			t.Cleanup(func() { _ = admin.Close() })
			opts := tc.client
			opts.Addr = srv.Addr()
			client := goredis.NewClient(&opts)
			t.Cleanup(func() { _ = client.Close() })
			hook := &faultHook{}
			replica := replicaHandler(Config{
				Name: "refused", Max: 1_000_000, Expiration: time.Hour,
				Storage: redis.New(client), OnStorageError: hook.record,
			})

			before := faultInfoInt(t, admin, "stats", "total_connections_received")
			const callers, busy = 8, 2 * time.Second
			var sent atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for c := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; time.Since(start) < busy; n++ {
						code, body := serveKeyed(replica, "refused-"+strconv.Itoa(c)+"-"+strconv.Itoa(n))
						if !assert.Equal(t, fiber.StatusOK, code, "%s", body) {
							return
						}
						sent.Add(1)
					}
				}()
			}
			wg.Wait()
			dials := faultInfoInt(t, admin, "stats", "total_connections_received") - before - 1 // the INFO's own
			t.Logf("%d requests over %v: %d connections", sent.Load(), busy, dials)
			assert.LessOrEqual(t, dials, 40, "connections dialled while Redis refused them")
			assert.Greater(t, sent.Load(), int64(1000), "too few requests to tell")

			reports := hook.calls()
			require.NotEmpty(t, reports)
			assert.Contains(t, reports[0].Error(), tc.want)
			var se *StorageError
			require.True(t, errors.As(reports[len(reports)-1], &se))
			assert.True(t, se.BreakerOpen, "the breaker is open: %v", se)
		})
	}
}

// nonProbeScripts is a go-redis hook that counts the script calls a client
// sends for keys other than the breaker's probe key.
type nonProbeScripts struct {
	probeKey string
	n        atomic.Int64
}

func (h *nonProbeScripts) count(cmd goredis.Cmder) {
	args := cmd.Args()
	if len(args) > 3 && (args[0] == "evalsha" || args[0] == "eval") && args[3] != h.probeKey {
		h.n.Add(1)
	}
}

func (h *nonProbeScripts) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *nonProbeScripts) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *nonProbeScripts) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// CLIENT PAUSE WRITE holds every script call while Redis still answers
// PING. The breaker's probe makes a script call that writes, so the
// breaker, once open, stays open until the pause ends: of 4 busy callers'
// requests during a 2 s pause, only those that tripped it were sent to
// Redis (counted by the client, probes aside: BreakerFailures calls in a
// row, and the other callers' calls already under way), and were rejected
// (429); the fallback admitted the rest. Then the replica decides in Redis
// again.
func TestFaultWritesPaused(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// With ContextTimeoutEnabled, so that the Store calls through this
	// client, whose hook counts.
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	cfg := faultConfig(FailFallback)
	cfg.Name = "paused"
	sent := &nonProbeScripts{probeKey: ConfigDefault.KeyPrefix + cfg.Name + "{probe}"}
	client.AddHook(sent)
	hook := &faultHook{}
	cfg.OnStorageError = hook.record
	cfg.Storage = redis.New(client)
	replica := replicaHandler(cfg)
	require.Equal(t, fiber.StatusOK, faultGet(replica, "warm").status)

	const pause, callers = 2 * time.Second, 4
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err())
	t.Cleanup(func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() })
	paused := time.Now()
	sent.n.Store(0)
	var waited, requests atomic.Int64
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Up to a margin before the pause ends, so that no request
			// counted here can have met Redis back.
			for n := 0; time.Since(paused) < pause-300*time.Millisecond; n++ {
				r := faultGet(replica, "paused-"+strconv.Itoa(c)+"-"+strconv.Itoa(n))
				// A call that timed out with the breaker closed is rejected
				// (the fallback does not know the key), then the fallback admits.
				if r.status != fiber.StatusTooManyRequests || r.took < ConfigDefault.StorageTimeout {
					if !assert.Equal(t, fiber.StatusOK, r.status) {
						return
					}
				}
				requests.Add(1)
				if r.took >= ConfigDefault.StorageTimeout {
					waited.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d requests during the pause: %d sent to Redis, %d took StorageTimeout or longer", requests.Load(), sent.n.Load(), waited.Load())
	assert.LessOrEqual(t, sent.n.Load(), int64(ConfigDefault.BreakerFailures+callers-1), "the breaker closed during the pause")
	reports := hook.calls()
	require.NotEmpty(t, reports)
	var se *StorageError
	require.ErrorAs(t, reports[len(reports)-1], &se)
	assert.True(t, se.BreakerOpen)

	require.NoError(t, admin.Do(ctx, "CLIENT", "UNPAUSE").Err())
	faultAwaitRecovery(t, []fasthttp.RequestHandler{replica}, FailFallback, faultSame("warm"), time.Now())
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
