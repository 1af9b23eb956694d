package limiter

// Several Limits in one limiter (Config.Limits): counts, headers, names, the rest of the Config.

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Limits of 3 per second and 5 per hour, for each algorithm, in memory and
// on Redis: 3 admitted and 5 rejected at once (rejections consume
// nothing), 2 s later exactly 2 more, then 429 with the hourly limit's
// Retry-After. The headers describe the most restrictive limit.
func TestLimitsPerSecondAndPerHour(t *testing.T) {
	for _, alg := range algorithms {
		for _, b := range limitBackends() {
			t.Run(alg.name+"/"+b.name, func(t *testing.T) {
				clock := &testClock{}
				app := newApp(b.config(t, Config{
					Limits:            []Limit{{Max: 3, Expiration: time.Second}, {Max: 5, Expiration: time.Hour}},
					LimiterMiddleware: alg.mw,
					KeyGenerator:      headerKey,
				}), clock, nil)
				var statuses []int
				for i := range 8 {
					resp := get(t, app, "/", "k")
					statuses = append(statuses, resp.StatusCode)
					if i == 7 {
						// The per-second limit rejects: its window ends in 1 s
						// (the sliding estimate fits in 1.334 s, and its count
						// is gone in 2); its bucket has a token in 334 ms; the
						// log's three entries leave in 1 s.
						want := map[string]headers{"FixedWindow": {"3", "0", "1", "1"}, "SlidingWindow": {"3", "0", "2", "2"}, "TokenBucket": {"3", "0", "1", "1"}, "SlidingLog": {"3", "0", "1", "1"}}
						assert.Equal(t, want[alg.name], headersOf(resp), "the per-second limit rejects")
					}
				}
				assert.Equal(t, []int{200, 200, 200, 429, 429, 429, 429, 429}, statuses)
				clock.advance(2 * time.Second)
				for i := range 2 {
					resp := get(t, app, "/", "k")
					require.Equal(t, 200, resp.StatusCode, "request %d 2 s on", i)
					if i == 1 {
						assert.Equal(t, "5", resp.Header.Get("X-RateLimit-Limit"), "the hourly limit, with none left, is the tightest")
						assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
					}
				}
				resp := get(t, app, "/", "k")
				require.Equal(t, 429, resp.StatusCode)
				retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				require.NoError(t, err)
				// The hour's fixed window ends 3598 s on; the sliding estimate
				// fits 720 s into the next window; the bucket refills a token
				// in 720 s, less the 2 s of refill since the first three;
				// the log's oldest entry, of 0 s, leaves 3598 s on.
				want := map[string]int{"FixedWindow": 3598, "SlidingWindow": 3598 + 720, "TokenBucket": 718, "SlidingLog": 3598}[alg.name]
				assert.Equal(t, want, retry, "Retry-After is the hourly limit's")
				assert.Equal(t, "5", resp.Header.Get("X-RateLimit-Limit"))
			})
		}
	}
}

// The IETF fields list every limit as a policy of its own, named after
// its window unless named, with its own r and t; Retry-After is never
// earlier than any t of an exhausted policy.
func TestLimitsIETFHeaders(t *testing.T) {
	for _, b := range limitBackends() {
		t.Run(b.name, func(t *testing.T) {
			clock := &testClock{}
			app := newApp(b.config(t, Config{
				Limits:       []Limit{{Max: 2, Expiration: 10 * time.Second}, {Max: 3, Expiration: time.Minute, PolicyName: "minute"}},
				Headers:      HeadersBoth,
				PolicyName:   "api",
				KeyGenerator: headerKey,
			}), clock, nil)
			resp := get(t, app, "/", "k")
			assert.Equal(t, `"api-10s";q=2;w=10, "minute";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))
			assert.Equal(t, `"api-10s";r=1;t=10, "minute";r=2;t=60`, resp.Header.Get("RateLimit"))
			get(t, app, "/", "k")
			clock.advance(10 * time.Second)
			get(t, app, "/", "k") // the minute's third
			clock.advance(5 * time.Second)
			resp = get(t, app, "/", "k")
			require.Equal(t, 429, resp.StatusCode)
			assert.Equal(t, `"api-10s";r=1;t=5, "minute";r=0;t=45`, resp.Header.Get("RateLimit"))
			assert.Equal(t, "45", resp.Header.Get("Retry-After"))
			assert.Equal(t, headers{"3", "0", "45", "45"}, headersOf(resp))
		})
	}
}

// Several limits with the rest of the limiter: a refund (SkipFailedRequests)
// credits every limit, DryRun counts but never rejects, OnDecision reports
// the most restrictive limit, and the deny cache replays the same
// headers without a call to Redis.
func TestLimitsWithTheRest(t *testing.T) {
	limits := []Limit{{Max: 2, Expiration: time.Second}, {Max: 4, Expiration: time.Minute}}
	for _, alg := range algorithms {
		for _, b := range limitBackends() {
			t.Run(alg.name+"/"+b.name+"/refunds", func(t *testing.T) {
				clock := &testClock{}
				app := newApp(b.config(t, Config{Limits: limits, LimiterMiddleware: alg.mw, KeyGenerator: headerKey, SkipFailedRequests: true}), clock,
					func(c *fiber.Ctx) error {
						if c.Query("fail") != "" {
							return fiber.ErrBadGateway
						}
						return c.SendString("ok")
					})
				for range 10 {
					require.Equal(t, http.StatusBadGateway, get(t, app, "/?fail=1", "k").StatusCode, "failures are credited back to both")
				}
				assert.Equal(t, 200, get(t, app, "/", "k").StatusCode)
				assert.Equal(t, 200, get(t, app, "/", "k").StatusCode)
				assert.Equal(t, 429, get(t, app, "/", "k").StatusCode)
			})
			t.Run(alg.name+"/"+b.name+"/dry run and the hook", func(t *testing.T) {
				clock := &testClock{}
				var events []DecisionEvent
				app := newApp(b.config(t, Config{Limits: limits, LimiterMiddleware: alg.mw, KeyGenerator: headerKey, DryRun: true,
					OnDecision: func(_ *fiber.Ctx, e DecisionEvent) { events = append(events, e) }}), clock, nil)
				for range 3 {
					assert.Equal(t, 200, get(t, app, "/", "k").StatusCode)
				}
				require.Len(t, events, 3)
				assert.True(t, events[1].Allowed)
				assert.Equal(t, DecisionEvent{Key: "k", Allowed: false, DryRun: true, Limit: 2, Remaining: 0, Expiration: time.Second, Cost: 1,
					RetryAfter: events[2].RetryAfter, Algorithm: algOf(alg.mw).String(), Backend: map[bool]string{true: "memory", false: "redis"}[b.storage == nil]},
					withoutLatency(events[2]))
				assert.Positive(t, events[2].RetryAfter)
				assert.LessOrEqual(t, events[2].RetryAfter, 2*time.Second, "the per-second limit's")
			})
		}
	}
}

// algOf is the algorithm of a LimiterHandler of this package.
func algOf(mw LimiterHandler) quota.Algorithm {
	switch mw.(type) {
	case SlidingWindow:
		return quota.SlidingWindow
	case TokenBucket:
		return quota.TokenBucket
	case SlidingLog:
		return quota.SlidingLog
	}
	return quota.FixedWindow
}

func withoutLatency(e DecisionEvent) DecisionEvent {
	e.Latency = 0
	return e
}

// The deny cache keeps every limit's part of a rejection: the same
// headers as Redis gave, without a call to Redis, until the longest
// RetryAfter has passed.
func TestLimitsDenyCache(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	admin := server.Client(t)
	clock := &testClock{}
	app := newApp(Config{
		Limits:       []Limit{{Max: 1, Expiration: 10 * time.Second}, {Max: 5, Expiration: time.Minute}},
		Headers:      HeadersBoth,
		Storage:      redis.New(client),
		KeyGenerator: headerKey,
	}, clock, nil)
	require.Equal(t, 200, get(t, app, "/", "k").StatusCode)
	first := get(t, app, "/", "k")
	require.Equal(t, 429, first.StatusCode)
	calls := scriptCalls(t, admin)
	clock.advance(500 * time.Millisecond) // within the 900 ms the cache keeps a rejection
	again := get(t, app, "/", "k")
	require.Equal(t, 429, again.StatusCode)
	assert.Equal(t, calls, scriptCalls(t, admin), "answered by the deny cache")
	assert.Equal(t, `"default-10s";r=0;t=10, "default-1m";r=4;t=60`, again.Header.Get("RateLimit"))
	assert.Equal(t, "10", again.Header.Get("Retry-After"))
	clock.advance(9500 * time.Millisecond)
	assert.Equal(t, 200, get(t, app, "/", "k").StatusCode)
}

// scriptCalls is how many script calls Redis has run.
func scriptCalls(t *testing.T, admin *goredis.Client) int {
	return redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
}

// With Redis down, FailFallback's in-memory limiter applies every limit.
func TestLimitsFallback(t *testing.T) {
	server := redistest.Start(t)
	// One dial a call, so that no dial outlives the test.
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	store := redis.New(client)
	server.Stop()
	app := newApp(Config{
		Limits:          []Limit{{Max: 2, Expiration: time.Second}, {Max: 3, Expiration: time.Minute}},
		Storage:         store,
		KeyGenerator:    headerKey,
		StorageTimeout:  50 * time.Millisecond,
		BreakerFailures: 1,
	}, &testClock{}, nil)
	var statuses []int
	for range 4 {
		statuses = append(statuses, get(t, app, "/", "k").StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429, 429}, statuses)
}

// Invalid Limits panic at New, naming the field.
func TestLimitsConfigPanics(t *testing.T) {
	two := []Limit{{Max: 1, Expiration: time.Second}, {Max: 10, Expiration: time.Hour}}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"with Max", Config{Limits: two, Max: 10}, "limiter: Limits is set, and so are Max (10) or Expiration (0s); set each limit's Max and Expiration in Limits only"},
		{"with Expiration", Config{Limits: two, Expiration: time.Hour}, "limiter: Limits is set, and so are Max (0) or Expiration (1h0m0s); set each limit's Max and Expiration in Limits only"},
		{"with MaxFunc", Config{Limits: two, MaxFunc: func(*fiber.Ctx) int { return 1 }}, "limiter: Limits and MaxFunc are both set; MaxFunc sets the Max of a single limit: use Max and Expiration with it, or Limits without it"},
		{"with Burst", Config{Limits: two, Burst: 3, LimiterMiddleware: TokenBucket{}}, "limiter: Limits is set, and so is Burst (3); set each limit's Burst in Limits"},
		{"too many", Config{Limits: []Limit{{1, time.Second, 0, ""}, {1, 2 * time.Second, 0, ""}, {1, 3 * time.Second, 0, ""}, {1, 4 * time.Second, 0, ""}, {1, 5 * time.Second, 0, ""}}}, "limiter: Limits has 5 limits; give at most 4"},
		{"no Max", Config{Limits: []Limit{{Expiration: time.Second}}}, "limiter: Limits[0].Max is 0; it must be >= 1"},
		{"no Expiration", Config{Limits: []Limit{{Max: 1, Expiration: time.Second}, {Max: 2}}}, "limiter: Limits[1].Expiration is 0s; it must be at least 1ms"},
		{"same window", Config{Limits: []Limit{{Max: 1, Expiration: time.Second}, {Max: 2, Expiration: time.Second}}}, "limiter: Limits[0] and Limits[1] have the same Expiration (1s); give each limit its own window"},
		{"negative Burst", Config{Limits: []Limit{{Max: 1, Expiration: time.Second, Burst: -1}}}, "limiter: Limits[0].Burst is -1; it must be >= 0 (0 means the default)"},
		{"Burst without the bucket", Config{Limits: []Limit{{Max: 1, Expiration: time.Second}, {Max: 2, Expiration: time.Hour, Burst: 4}}}, "limiter: Limits[1].Burst is 4 but only TokenBucket uses it; remove it or use TokenBucket{}"},
		{"too large", Config{Limits: []Limit{{Max: 1 << 40, Expiration: time.Second}}}, "limiter: Limits[0].Max is 1099511627776; it must be at most 4294967295 (below 2^32)"},
		{"a policy name without IETF", Config{Limits: []Limit{{Max: 1, Expiration: time.Second, PolicyName: "x"}}}, "limiter: Limits[0].PolicyName is set but Headers is XRateLimit; PolicyName and HeaderPartitionKey apply to the IETF headers only (HeadersIETF or HeadersBoth)"},
		{"the same policy name", Config{Headers: HeadersIETF, Limits: []Limit{{Max: 1, Expiration: time.Second, PolicyName: "x"}, {Max: 2, Expiration: time.Hour, PolicyName: "x"}}}, "limiter: Limits[0] and Limits[1] have the same PolicyName \"x\"; give each limit its own"},
		{"a colon in Name", Config{Name: "api:v1"}, "limiter: Name \"api:v1\" contains ':'; it must not contain ':', '{' or '}' (it is a part of every key in Storage, and braces would make it a Redis Cluster hash tag)"},
		{"a brace in Name", Config{Name: "{api}"}, "limiter: Name \"{api}\" contains '{'; it must not contain ':', '{' or '}' (it is a part of every key in Storage, and braces would make it a Redis Cluster hash tag)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tt.want, func() { New(tt.cfg) })
		})
	}
	// A config copied from ConfigDefault has Max and Expiration set; with
	// Limits they count as unset.
	cfg := ConfigDefault
	cfg.Limits = two
	app := newApp(cfg, &testClock{}, nil)
	assert.Equal(t, 200, get(t, app, "/", "").StatusCode)
	assert.Equal(t, 429, get(t, app, "/", "").StatusCode)
}

// A rejection replayed by the deny cache says what Redis would say: also
// for a limit whose own wait has passed while another still rejects (it
// then has room for the request again).
func TestLimitsDenyCacheReplaysWhatRedisSays(t *testing.T) {
	server := redistest.Start(t)
	var got []string
	for _, disable := range []bool{false, true} {
		require.NoError(t, server.Client(t).FlushDB(context.Background()).Err())
		clock := &testClock{}
		app := newApp(Config{
			Name:              "replay-" + strconv.FormatBool(disable),
			Limits:            []Limit{{Max: 3, Expiration: 30 * time.Second}, {Max: 1, Expiration: 5 * time.Second, Burst: 3}},
			LimiterMiddleware: TokenBucket{},
			Headers:           HeadersBoth,
			Storage:           redis.New(server.Client(t)),
			KeyGenerator:      headerKey,
			DisableDenyCache:  disable,
		}, clock, nil)
		for range 3 {
			require.Equal(t, 200, get(t, app, "/", "k").StatusCode)
		}
		require.Equal(t, 429, get(t, app, "/", "k").StatusCode)
		clock.advance(6 * time.Second)
		resp := get(t, app, "/", "k")
		require.Equal(t, 429, resp.StatusCode)
		got = append(got, resp.Header.Get("RateLimit")+" | "+resp.Header.Get("Retry-After")+" | "+resp.Header.Get("X-RateLimit-Remaining"))
	}
	assert.Equal(t, got[1], got[0], "with the deny cache, and without")
}

// Policy names and keys carry a limit's window as configured, and a time
// step other than 1 ms, so that a state kept in other steps is another key.
func TestNamesOfLimitsInSteps(t *testing.T) {
	client := redistest.Start(t).Client(t)
	app := newApp(Config{
		Limits:  []Limit{{Max: 10, Expiration: time.Second}, {Max: 1_000_000_000, Expiration: 30 * 24 * time.Hour}},
		Headers: HeadersIETF,
		Storage: redis.New(client),
	}, nil, nil)
	resp := get(t, app, "/", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"default-1s";q=10;w=1, "default-720h";q=1000000000;w=2592000`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, []string{"limiter::fw:1s+720h@1152ms:0.0.0.0"}, storedKeys(t, client, "*"))
}
