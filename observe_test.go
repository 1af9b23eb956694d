package limiter

// What a limiter reports of its decisions: DryRun, OnDecision's events, their Source names.

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// eventLog keeps what OnDecision was called with, keys copied, latencies
// cleared (checked apart).
type eventLog struct {
	mu     sync.Mutex
	events []DecisionEvent
}

func (l *eventLog) hook(_ *fiber.Ctx, e DecisionEvent) {
	e.Key = strings.Clone(e.Key)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// take returns the events so far, latencies set to 0 once checked to be
// non-negative and below a second, and forgets them.
func (l *eventLog) take(t *testing.T) []DecisionEvent {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.events
	l.events = nil
	for i := range out {
		assert.GreaterOrEqual(t, out[i].Latency, time.Duration(0))
		assert.Less(t, out[i].Latency, time.Second)
		out[i].Latency = 0
	}
	return out
}

// Dry run: a client over the limit is never rejected, gets the usual
// rate-limit headers but no Retry-After, is not counted, and the hook sees
// each would-be rejection. Once the window has passed, the client has its
// full quota again, as if it had been rejected.
func TestDryRun(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			var log eventLog
			clock := &testClock{}
			app := newApp(Config{
				Max: 2, Expiration: 10 * time.Second, LimiterMiddleware: alg.mw, DryRun: true,
				KeyGenerator: headerKey, OnDecision: log.hook,
			}, clock, nil)
			for i := range 6 {
				resp := get(t, app, "/", "c")
				require.Equal(t, 200, resp.StatusCode, "request %d: never rejected", i)
				h := headersOf(resp)
				assert.Equal(t, "2", h.limit)
				assert.Equal(t, map[bool]string{true: "1", false: "0"}[i == 0], h.remaining, "request %d", i)
				assert.Empty(t, h.retryAfter, "request %d: no Retry-After on an admitted response", i)
			}
			events := log.take(t)
			require.Len(t, events, 6)
			for i, e := range events {
				assert.Equal(t, i < 2, e.Allowed, "event %d", i)
				assert.True(t, e.DryRun)
				assert.Equal(t, "c", e.Key)
				if !e.Allowed {
					assert.Positive(t, e.RetryAfter, "a would-be rejection says when it would pass")
				}
			}
			// Would-be rejections counted nothing: 10 s on, all fresh.
			clock.advance(20 * time.Second)
			for range 2 {
				get(t, app, "/", "c")
			}
			for i, e := range log.take(t) {
				assert.True(t, e.Allowed, "after the window, event %d", i)
			}
		})
	}
}

// Dry run with FailClosed: a failing Storage lets requests through, and the
// hook sees what would have been a 503.
func TestDryRunFailClosedLetsThrough(t *testing.T) {
	var log eventLog
	store := newFlakyStorage(t)
	store.mode.Store(storageErr)
	app := newApp(Config{Storage: store, FailurePolicy: FailClosed, DryRun: true, OnDecision: log.hook}, &testClock{}, nil)
	resp := get(t, app, "/", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("Retry-After"))
	events := log.take(t)
	require.Len(t, events, 1)
	assert.Equal(t, SourceFailClosed, events[0].Source)
	assert.False(t, events[0].Allowed)
	assert.True(t, events[0].Fallback())
}

// The hook's arguments for each kind of decision: the in-memory manager,
// Redis (then its deny cache), and while Storage fails, FailFallback's
// limiter, FailOpen and FailClosed.
func TestOnDecisionEvents(t *testing.T) {
	base := DecisionEvent{Key: "k", Cost: 1, Limit: 2, Expiration: 10 * time.Second, Algorithm: "sliding_window"}
	event := func(allowed bool, remaining int, retry time.Duration, backend string, src Source) DecisionEvent {
		e := base
		e.Allowed, e.Remaining, e.RetryAfter, e.Backend, e.Source = allowed, remaining, retry, backend, src
		return e
	}
	// Max 2 per 10 s, both counted at 0, the third at 5 s: it fits when
	// 2×(1-e) + 1 <= 2 in the next window, at e = 1/2, 15 s: 10 s on.
	const slidingRetry = 10 * time.Second
	server := redistest.Start(t)
	stopped := redistest.Start(t)
	stopped.Stop()
	tests := []struct {
		name    string
		cfg     Config
		storage func() fiber.Storage // nil: in memory
		down    int32                // flakyStorage's mode
		want    []DecisionEvent
	}{
		{
			name: "memory",
			want: []DecisionEvent{
				event(true, 1, 0, "memory", SourceBackend),
				event(true, 0, 0, "memory", SourceBackend),
				event(false, 0, slidingRetry, "memory", SourceBackend),
			},
		},
		{
			name:    "redis, then the deny cache",
			storage: func() fiber.Storage { return redis.New(server.Client(t)) }, // on the test clock
			want: []DecisionEvent{
				event(true, 1, 0, "redis", SourceBackend),
				event(true, 0, 0, "redis", SourceBackend),
				event(false, 0, slidingRetry, "redis", SourceBackend),
				event(false, 0, slidingRetry, "redis", SourceDenyCache),
			},
		},
		{
			name:    "redis down, the fallback",
			storage: func() fiber.Storage { return redis.New(stopped.Client(t)) },
			want: []DecisionEvent{
				event(true, 1, 0, "redis", SourceFallback),
				event(true, 0, 0, "redis", SourceFallback),
				event(false, 0, slidingRetry, "redis", SourceFallback),
			},
		},
		{
			name:    "fallback",
			storage: func() fiber.Storage { s := newFlakyStorage(t); s.mode.Store(storageErr); return s },
			want: []DecisionEvent{
				event(true, 1, 0, "storage", SourceFallback),
				event(true, 0, 0, "storage", SourceFallback),
				event(false, 0, slidingRetry, "storage", SourceFallback),
			},
		},
		{
			name:    "fail open",
			cfg:     Config{FailurePolicy: FailOpen},
			storage: func() fiber.Storage { s := newFlakyStorage(t); s.mode.Store(storageErr); return s },
			want:    []DecisionEvent{event(true, 0, 0, "storage", SourceFailOpen), event(true, 0, 0, "storage", SourceFailOpen)},
		},
		{
			name:    "fail closed",
			cfg:     Config{FailurePolicy: FailClosed, BreakerCooldown: 3 * time.Second},
			storage: func() fiber.Storage { s := newFlakyStorage(t); s.mode.Store(storageErr); return s },
			want:    []DecisionEvent{event(false, 0, 3*time.Second, "storage", SourceFailClosed)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log eventLog
			cfg := tt.cfg
			cfg.Max, cfg.Expiration, cfg.LimiterMiddleware = 2, 10*time.Second, SlidingWindow{}
			cfg.KeyGenerator, cfg.OnDecision = headerKey, log.hook
			cfg.KeyPrefix = "events:" + tt.name + ":"
			if tt.storage != nil {
				cfg.Storage = tt.storage()
			}
			clock := &testClock{}
			app := newApp(cfg, clock, nil)
			for i := range tt.want {
				if i == 2 {
					clock.advance(5 * time.Second)
				}
				get(t, app, "/", "k")
			}
			got := log.take(t)
			require.Len(t, got, len(tt.want))
			for i := range got {
				wantFallback := tt.want[i].Source == SourceFallback || tt.want[i].Source == SourceFailOpen || tt.want[i].Source == SourceFailClosed
				assert.Equal(t, wantFallback, got[i].Fallback(), "event %d: Fallback()", i)
				assert.Equal(t, tt.want[i], got[i], "event %d", i)
			}
		})
	}
}

// Source names are metric labels.
func TestDecisionSourceStrings(t *testing.T) {
	want := map[Source]string{
		SourceBackend: "backend", SourceDenyCache: "deny_cache", SourceFallback: "fallback",
		SourceFailOpen: "fail_open", SourceFailClosed: "fail_closed", 9: "Source(9)",
	}
	for s, name := range want {
		assert.Equal(t, name, s.String())
	}
	assert.False(t, DecisionEvent{Source: SourceDenyCache}.Fallback())
	assert.True(t, DecisionEvent{Source: SourceFallback}.Fallback())
}

// OnDecision's event names the limiter (Config.Name), so that one hook
// can serve several limiters of an app, rate and Concurrency alike.
func TestDecisionEventNamesTheLimiter(t *testing.T) {
	for _, mw := range []LimiterHandler{FixedWindow{}, Concurrency{}} {
		var got []string
		app := newApp(Config{Name: "api", LimiterMiddleware: mw, OnDecision: func(_ *fiber.Ctx, e DecisionEvent) { got = append(got, e.Name) }}, nil, nil)
		get(t, app, "/", "")
		assert.Equal(t, []string{"api"}, got)
	}
}
