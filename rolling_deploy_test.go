package limiter

import (
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

// A rolling deploy that changes a setting: replicas of the old and of the
// new version (one Name, one store, each its own client) take turns on
// one key. A change of BlockFor or MinInterval keeps the key's counts,
// whichever way it goes, so the two together admit exactly the limit; a
// change of the limits' windows or number (Limits), or of a quota so large
// that its time step changes, keeps its counts apart (the key's name
// holds them), so each version admits at most its own limit, as the docs
// say. Every algorithm, on Redis and on a Storage of get and set.
func TestRollingDeployTakesTurns(t *testing.T) {
	server := redistest.Start(t)
	plain := Config{Max: 10, Expiration: time.Hour}
	with := func(f func(*Config)) Config { c := plain; f(&c); return c }
	blockFor := with(func(c *Config) { c.BlockFor = time.Second })
	minInterval := with(func(c *Config) { c.MinInterval = time.Millisecond })
	both := with(func(c *Config) { c.BlockFor, c.MinInterval = time.Second, time.Millisecond })
	limits := with(func(c *Config) {
		c.Max, c.Expiration = 0, 0
		c.Limits = []Limit{{Max: 10, Expiration: time.Hour}, {Max: 1000, Expiration: 24 * time.Hour}}
	})
	deploys := []struct {
		name     string
		old, new Config
		together int // the most both may admit
	}{
		{"BlockFor on", plain, blockFor, 10},
		{"BlockFor off", blockFor, plain, 10},
		{"MinInterval on", plain, minInterval, 10},
		{"MinInterval off", minInterval, plain, 10},
		{"both on", plain, both, 10},
		{"BlockFor for MinInterval", blockFor, minInterval, 10},
		{"both for MinInterval", both, minInterval, 10},
		{"a limit added", plain, limits, 20},
		{"a limit removed", limits, plain, 20},
	}
	stores := []struct {
		name    string
		storage func() fiber.Storage
	}{
		{"redis", func() fiber.Storage { return redis.New(goredis.NewClient(&goredis.Options{Addr: server.Addr()})) }},
		{"storage", nil},
	}
	for _, st := range stores {
		for _, d := range deploys {
			for _, alg := range algorithms {
				t.Run(st.name+"/"+d.name+"/"+alg.name, func(t *testing.T) {
					shared := newMapStorage()
					var clock testClock
					clock.now.Store(1_800_000_000_000)
					var replicas []fasthttp.RequestHandler
					for _, cfg := range []Config{d.old, d.new, d.old, d.new} {
						cfg.Name, cfg.LimiterMiddleware, cfg.clock = "deploy", alg.mw, clock.millis
						cfg = strict(cfg)
						if st.storage == nil {
							cfg.Storage = shared
						} else {
							s := st.storage()
							t.Cleanup(func() { _ = s.Close() })
							cfg.Storage = s
						}
						replicas = append(replicas, replicaHandler(cfg))
					}
					key := t.Name()
					admitted := [2]int{}
					for i := range 200 {
						clock.advance(2 * time.Millisecond) // past any MinInterval
						if code, _ := serveKeyed(replicas[i%len(replicas)], key); code == fiber.StatusOK {
							admitted[i%2]++
						}
					}
					require.LessOrEqual(t, admitted[0]+admitted[1], d.together, "old %d, new %d", admitted[0], admitted[1])
					assert.LessOrEqual(t, admitted[0], 10, "the old version alone")
					assert.LessOrEqual(t, admitted[1], 10, "the new version alone")
					assert.Equal(t, d.together, admitted[0]+admitted[1], "each version admits what its counts allow")
				})
			}
		}
	}
}
