// Package redis is an atomic rate limiter on Redis: one script call per
// decision, with the state of a limited key in one Redis key, so that any
// number of processes sharing a Redis (or a Redis Cluster) admit exactly the
// limit together. It is the Redis backend of github.com/fiberlimit/limiter
// and usable on its own over any redis.UniversalClient of go-redis v9.
//
// Each algorithm is a Lua script (fixed_window.lua, sliding_window.lua,
// token_bucket.lua, each after common.lua) run with EVALSHA, falling back to
// EVAL when the server does not have it (after a restart or SCRIPT FLUSH).
// Time comes from the server's TIME unless WithClock is given, so processes
// with skewed clocks agree. Every write sets a TTL of exactly the time the
// state still matters; nothing is stored without one. Redis 6 or later.
package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
)

// dispatch ends every script: ARGV[7] says take or refund.
const dispatch = `
if mode == 'refund' then
  return refund()
end
return take()
`

var scripts = [...]*redis.Script{
	FixedWindow:   redis.NewScript(commonLua + fixedWindowLua + dispatch),
	SlidingWindow: redis.NewScript(commonLua + slidingWindowLua + dispatch),
	TokenBucket:   redis.NewScript(commonLua + tokenBucketLua + dispatch),
}

// Store decides rate limits in Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	clock  func() time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the Store send its own time with each call instead of
// letting Redis read its clock: for tests, and for deployments that trust
// their hosts' clocks more than the server's. Processes sharing keys must
// then have synchronized clocks.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.clock = now }
}

// New returns a Store over client, which may be a plain, cluster, ring or
// failover client.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Conn returns the client the Store uses.
func (s *Store) Conn() redis.UniversalClient { return s.client }

// maxExact bounds limit*window in the scripts' time unit: every integer the
// scripts form is at most about 3*limit*window, and must stay below 2^53.
const maxExact = 1 << 51

// units returns the time unit (µs) for rule: microseconds where the
// arithmetic stays exact in a Lua double, else milliseconds. The window in
// that unit is rounded up.
func units(rule Rule, burst int64) (unit, window int64) {
	unit, window = 1, rule.Window.Microseconds()
	if big := max(rule.Limit, burst); big > 0 && window > maxExact/big {
		unit, window = 1000, (window+999)/1000
	}
	return unit, window
}

func (s *Store) run(ctx context.Context, key string, rule Rule, cost int64, mode string, countedIn int64) ([]interface{}, int64, error) {
	if rule.Algorithm < FixedWindow || rule.Algorithm > TokenBucket {
		return nil, 0, fmt.Errorf("limiter: redis: unknown algorithm %d", rule.Algorithm)
	}
	if rule.Limit <= 0 || rule.Window < time.Millisecond {
		return nil, 0, fmt.Errorf("limiter: redis: rule needs Limit > 0 and Window >= 1ms, got %d per %v", rule.Limit, rule.Window)
	}
	burst := rule.Burst
	if burst <= 0 || rule.Algorithm != TokenBucket {
		burst = rule.Limit
	}
	unit, window := units(rule, burst)
	now := int64(-1) // the server's TIME
	if s.clock != nil {
		now = s.clock().UnixMicro() / unit
	}
	res, err := scripts[rule.Algorithm].Run(ctx, s.client, []string{key},
		rule.Limit, burst, window, cost, now, unit, mode, countedIn).Slice()
	if err != nil {
		return nil, unit, fmt.Errorf("limiter: redis %s %q: %w", mode, key, err)
	}
	return res, unit, nil
}

// Take decides a request of cost units for key under rule, and counts it if
// it is admitted, in one round trip.
func (s *Store) Take(ctx context.Context, key string, rule Rule, cost int64) (Result, error) {
	res, unit, err := s.run(ctx, key, rule, cost, "take", 0)
	if err != nil {
		return Result{}, err
	}
	if len(res) != 6 {
		return Result{}, fmt.Errorf("limiter: redis take %q: script returned %d values, want 6", key, len(res))
	}
	var v [6]int64
	for i := range v {
		n, ok := res[i].(int64)
		if !ok {
			return Result{}, errors.New("limiter: redis take: script returned a non-integer")
		}
		v[i] = n
	}
	r := Result{
		Allowed:    v[0] == 1,
		Limit:      v[1],
		Remaining:  v[2],
		ResetAfter: span(v[3], unit),
		RetryAfter: span(v[4], unit),
		CountedIn:  v[5],
	}
	if v[4] < 0 {
		r.RetryAfter = Never
	}
	return r, nil
}

// Refund credits cost units of an admitted request back to key, in the
// window that countedIn (from its Result) names, if that window still
// counts. One round trip.
func (s *Store) Refund(ctx context.Context, key string, rule Rule, cost int64, countedIn int64) error {
	_, _, err := s.run(ctx, key, rule, cost, "refund", countedIn)
	return err
}

func span(n, unit int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(n*unit) * time.Microsecond
}
