package limiter

// Config checked at New: invalid values panic naming the field, and defaults fill the rest.

import (
	"testing"
	"time"

	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInvalidConfigPanicsNamingTheField(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"negative Max", Config{Max: -1}, "limiter: Max is -1; it must be >= 0"},
		{"negative Burst", Config{Burst: -2, LimiterMiddleware: TokenBucket{}}, "limiter: Burst is -2; it must be >= 0"},
		{"negative MaxKeys", Config{MaxKeys: -1}, "limiter: MaxKeys is -1"},
		{"negative Expiration", Config{Expiration: -time.Second}, "limiter: Expiration is -1s; it must be 0 (default 1m0s) or at least 1ms"},
		{"sub-millisecond Expiration", Config{Expiration: time.Microsecond}, "limiter: Expiration is 1µs"},
		{"Burst without TokenBucket", Config{Burst: 3}, "limiter: Burst is 3 but only TokenBucket uses it"},
		{"Max beyond 2^32", Config{Max: 1 << 32}, "limiter: Max is 4294967296; it must be at most 4294967295 (below 2^32)"},
		{"SlidingLog beyond its Max", Config{Max: 10_001, LimiterMiddleware: SlidingLog{}}, "limiter: Max is 10001; SlidingLog keeps one entry per unit of Max and takes at most 10000"},
		{"negative BlockFor", Config{BlockFor: -1}, "limiter: BlockFor is -1ns"},
		{"MinInterval beyond a year", Config{MinInterval: 366 * 24 * time.Hour}, "limiter: MinInterval is 8784h0m0s"},
		{"negative Duration", Config{Duration: -time.Second}, "limiter: Duration is -1s"},
		{"negative Burst of a limit", Config{Limits: []Limit{{Max: 1, Expiration: time.Second, Burst: -1}}, LimiterMiddleware: TokenBucket{}}, "limiter: Limits[0].Burst is -1"},
		{"PolicyName without IETF headers", Config{PolicyName: "api"}, "PolicyName"},
		{"HeaderPartitionKey without IETF headers", Config{HeaderPartitionKey: true}, "HeaderPartitionKey"},
		{"Burst beyond exact arithmetic", Config{Burst: 1 << 33, LimiterMiddleware: TokenBucket{}}, "limiter: Burst is 8589934592"},
		{"nil pointer algorithm", Config{LimiterMiddleware: (*SlidingWindow)(nil)}, "limiter: LimiterMiddleware is a nil *limiter.SlidingWindow"},
		{"algorithm returning nil", Config{LimiterMiddleware: nilHandler{}}, "limiter: LimiterMiddleware limiter.nilHandler returned a nil handler"},
		{"negative StorageTimeout", Config{StorageTimeout: -time.Millisecond}, "limiter: StorageTimeout is -1ms; it must be 0 (default 100ms) or at least 1ms"},
		{"sub-millisecond StorageTimeout", Config{StorageTimeout: 100}, "limiter: StorageTimeout is 100ns; it must be 0 (default 100ms) or at least 1ms"},
		{"negative BreakerCooldown", Config{BreakerCooldown: -time.Second}, "limiter: BreakerCooldown is -1s; it must be 0 (default 500ms) or at least 1ms"},
		{"sub-millisecond BreakerCooldown", Config{BreakerCooldown: time.Microsecond}, "limiter: BreakerCooldown is 1µs"},
		{"negative BreakerFailures", Config{BreakerFailures: -1}, "limiter: BreakerFailures is -1; it must be >= 0"},
		{"BreakerFailures beyond int32", Config{BreakerFailures: 1 << 31}, "limiter: BreakerFailures is 2147483648; it must be at most 2147483647"},
		{"negative DenyCacheKeys", Config{DenyCacheKeys: -1}, "limiter: DenyCacheKeys is -1; it must be >= 0"},
		{"huge DenyCacheKeys", Config{DenyCacheKeys: 1 << 30}, "limiter: DenyCacheKeys is 1073741824; it must be at most 16777216"},
		{"unknown FailurePolicy", Config{FailurePolicy: 7}, "limiter: FailurePolicy is 7; it must be FailFallback, FailOpen, FailClosed or FailError"},
		{"Key and KeyGenerator", Config{Key: headerKey, KeyGenerator: headerKey}, "limiter: Key (deprecated) and KeyGenerator are both set"},
		{"Store and Storage", Config{Store: newMapStorage(), Storage: newMapStorage()}, "limiter: Store (deprecated) and Storage are both set"},
		{"Duration and Expiration disagree", Config{Duration: time.Second, Expiration: 2 * time.Minute}, "limiter: Duration (deprecated) is 1s and Expiration is 2m0s"},
		{"Store without a client", Config{Storage: &redis.Store{}}, "limiter: Storage is a storage/redis Store with no client; make it with redis.New"},
		{"nil Store", Config{Storage: (*redis.Store)(nil)}, "limiter: Storage is a nil *redis.Store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				require.NotNil(t, r, "New did not panic")
				assert.Contains(t, r, tt.want)
			}()
			New(tt.cfg)
		})
	}
}

type nilHandler struct{}

func (nilHandler) New(Config) fiber.Handler { return nil }

func TestConfigDefaults(t *testing.T) {
	cfg := configDefault(Config{})
	assert.Equal(t, 5, cfg.Max)
	assert.Equal(t, time.Minute, cfg.Expiration)
	assert.Equal(t, "limiter:", cfg.KeyPrefix)
	assert.Equal(t, 1<<20, cfg.MaxKeys)
	assert.Equal(t, FixedWindow{}, cfg.LimiterMiddleware)
	assert.NotNil(t, cfg.KeyGenerator)
	assert.NotNil(t, cfg.LimitReached)
	assert.Equal(t, FailFallback, cfg.FailurePolicy)
	assert.Equal(t, 100*time.Millisecond, cfg.StorageTimeout)
	assert.Equal(t, 5, cfg.BreakerFailures)
	assert.Equal(t, 500*time.Millisecond, cfg.BreakerCooldown)
	assert.Equal(t, 8192, cfg.DenyCacheKeys)

	// Fiber's deprecated fields still work.
	key := func(*fiber.Ctx) string { return "k" }
	store := newMapStorage()
	old := configDefault(Config{Duration: 3 * time.Second, Key: key, Store: store})
	assert.Equal(t, 3*time.Second, old.Expiration)
	assert.Equal(t, "k", old.KeyGenerator(nil))
	assert.Same(t, store, old.Storage.(*mapStorage))

	require.NotPanics(t, func() { New() })
}

// A Fiber config with the deprecated fields goes through New, which applies
// the defaults twice (New, then the LimiterHandler's New), and so does a
// config built from ConfigDefault with the deny cache turned off.
func TestConfigsThroughNew(t *testing.T) {
	for name, cfg := range map[string]Config{
		"Key":                          {Key: headerKey},
		"Store":                        {Store: newMapStorage()},
		"Duration":                     {Duration: time.Second},
		"all deprecated":               {Key: headerKey, Store: newMapStorage(), Duration: time.Second, LimiterMiddleware: TokenBucket{}},
		"ConfigDefault, no deny cache": func() Config { c := ConfigDefault; c.DisableDenyCache = true; c.Storage = newMapStorage(); return c }(),
	} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() { New(cfg) })
		})
	}
	app := newApp(Config{Max: 1, Key: headerKey, Store: newMapStorage()}, &testClock{}, nil)
	require.Equal(t, 200, get(t, app, "/", "a").StatusCode)
	require.Equal(t, 429, get(t, app, "/", "a").StatusCode)
	require.Equal(t, 200, get(t, app, "/", "b").StatusCode, "Key keyed the requests")
}

// A config copied from ConfigDefault with a deprecated field changed works
// as in Fiber: Duration replaces Expiration, Key replaces KeyGenerator and
// Store replaces Storage. Only another value of the user's own in the
// successor as well is ambiguous, and panics.
func TestDeprecatedFieldsOverrideConfigDefault(t *testing.T) {
	clock := &testClock{}
	cfg := ConfigDefault
	cfg.Max = 1
	cfg.Duration = 30 * time.Second
	cfg.Key = headerKey
	cfg.Store = newMapStorage()
	app := newApp(cfg, clock, nil)
	require.Equal(t, 200, get(t, app, "/", "a").StatusCode)
	require.Equal(t, 429, get(t, app, "/", "a").StatusCode)
	require.Equal(t, 200, get(t, app, "/", "b").StatusCode, "Key keyed the requests")
	clock.advance(29 * time.Second)
	require.Equal(t, 429, get(t, app, "/", "a").StatusCode)
	clock.advance(time.Second)
	require.Equal(t, 200, get(t, app, "/", "a").StatusCode, "a window of Duration, 30 s")

	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"Duration and another Expiration", Config{Duration: time.Second, Expiration: 2 * time.Minute}, "limiter: Duration (deprecated) is 1s and Expiration is 2m0s; set only Expiration"},
		{"Key and another KeyGenerator", Config{Key: headerKey, KeyGenerator: headerKey}, "limiter: Key (deprecated) and KeyGenerator are both set; set only KeyGenerator"},
		{"Store and another Storage", Config{Store: newMapStorage(), Storage: newMapStorage()}, "limiter: Store (deprecated) and Storage are both set; set only Storage"},
	} {
		assert.PanicsWithValue(t, tt.want, func() { New(tt.cfg) }, tt.name)
	}
	same := newMapStorage()
	assert.NotPanics(t, func() { New(Config{Duration: time.Second, Expiration: time.Second, Store: same, Storage: same}) }, "the same value twice")
}

func TestNegativeCostFailsTheRequest(t *testing.T) {
	app := newApp(Config{Cost: func(*fiber.Ctx) int { return -1 }}, &testClock{}, nil)
	require.Equal(t, 500, get(t, app, "/", "").StatusCode)
}
