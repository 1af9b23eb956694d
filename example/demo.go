package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
)

// demoKey is the one key GET /demo counts every request under, so that all
// clients, on every replica, share one quota and a load generator can check
// the exact total.
const demoKey = "demo"

// demoWindow is the period of the /demo limit: long enough that no window
// ends during a demo.
const demoWindow = time.Hour

// demoName is the /demo limiter's Name, its identity in Storage.
const demoName = "demo"

// demoConfig is the limit of GET /demo: Limit requests per demoWindow, with
// the named algorithm.
type demoConfig struct {
	Limit     int
	Algorithm string // a key of demoAlgorithms
}

// defaultDemo is the /demo limit without flags.
var defaultDemo = demoConfig{Limit: 1000, Algorithm: "fixed"}

// demoAlgorithms maps the -algorithm flag's values to the limiter's
// algorithms and the tag each puts in its Redis keys.
var demoAlgorithms = map[string]struct {
	handler limiter.LimiterHandler
	tag     string
}{
	"fixed":   {limiter.FixedWindow{}, "fw"},
	"sliding": {limiter.SlidingWindow{}, "sw"},
	"token":   {limiter.TokenBucket{}, "tb"},
	"log":     {limiter.SlidingLog{}, "sl"},
}

// algorithmNames lists the -algorithm flag's values, sorted.
func algorithmNames() []string {
	names := make([]string, 0, len(demoAlgorithms))
	for name := range demoAlgorithms {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// maxLogLimit is the largest Max of a SlidingLog.
const maxLogLimit = 10_000

// validate reports a limit below 1 or an unknown algorithm.
func (d demoConfig) validate() error {
	if d.Limit < 1 {
		return fmt.Errorf("-demo-limit %d: want at least 1", d.Limit)
	}
	if _, ok := demoAlgorithms[d.Algorithm]; !ok {
		return fmt.Errorf("-algorithm %q: want one of %s", d.Algorithm, strings.Join(algorithmNames(), ", "))
	}
	if d.Algorithm == "log" && d.Limit > maxLogLimit {
		return fmt.Errorf("-demo-limit %d: the sliding log keeps one entry per request, at most %d", d.Limit, maxLogLimit)
	}
	return nil
}

// config is the limiter configuration of /demo, before storage.
func (d demoConfig) config() limiter.Config {
	return limiter.Config{
		Name:              demoName,
		Max:               d.Limit,
		Expiration:        demoWindow,
		LimiterMiddleware: demoAlgorithms[d.Algorithm].handler,
		KeyGenerator:      func(*fiber.Ctx) string { return demoKey },
	}
}

// describe says in a few words what /demo allows.
func (d demoConfig) describe() string {
	if d.Algorithm == "token" {
		return fmt.Sprintf("token bucket: burst %d, refills %d per hour, one bucket for all clients", d.Limit, d.Limit)
	}
	return fmt.Sprintf("%s window: %d requests per hour, one quota for all clients", d.Algorithm, d.Limit)
}

// redisKey is the Redis key /demo's state is kept under: the limiter's
// default KeyPrefix, its identity (its Name, the algorithm's tag and the
// window) and demoKey.
func (d demoConfig) redisKey() string {
	return limiter.ConfigDefault.KeyPrefix + demoName + ":" + demoAlgorithms[d.Algorithm].tag + ":1h:" + demoKey
}
