// Package redis is an atomic rate limiter on Redis: one script call per
// decision, with the state of a limited key in one Redis key, so that any
// number of processes sharing a Redis (or a Redis Cluster) admit exactly the
// limit together. It is the Redis backend of github.com/fiberlimit/limiter
// and usable on its own over any redis.UniversalClient of go-redis v9.
//
// Each algorithm is a Lua script (fixed_window.lua, sliding_window.lua,
// token_bucket.lua, each between head.lua and tail.lua) run with EVALSHA, falling back to
// EVAL when the server does not have it (after a restart or SCRIPT FLUSH).
// Time comes from the server's TIME unless WithClock is given, so processes
// with skewed clocks agree; time is kept in milliseconds. Every write sets a
// TTL of exactly the time the state still matters; nothing is stored
// without one. Redis 6 or later.
package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed head.lua
	headLua string
	//go:embed tail.lua
	tailLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
)

var scripts = [...]*redis.Script{
	FixedWindow:   redis.NewScript(headLua + fixedWindowLua + tailLua),
	SlidingWindow: redis.NewScript(headLua + slidingWindowLua + tailLua),
	TokenBucket:   redis.NewScript(headLua + tokenBucketLua + tailLua),
}

// Store decides rate limits in Redis. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	clock  func() time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the Store send its own time (whole milliseconds, not
// before 1970) with each call instead of letting Redis read its clock: for
// tests, and for deployments that trust their hosts' clocks more than the
// server's. Processes sharing keys must then have synchronized clocks.
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

// maxExact bounds limit*window (window in ms): every integer the scripts
// form is at most about 3*limit*window, and must stay below 2^53, where Lua
// doubles are exact.
const maxExact = 1 << 51

func (s *Store) run(ctx context.Context, key string, rule Rule, cost int64, mode string, countedIn int64) ([]interface{}, error) {
	if rule.Algorithm < FixedWindow || rule.Algorithm > TokenBucket {
		return nil, fmt.Errorf("limiter: redis: unknown algorithm %d", rule.Algorithm)
	}
	burst := rule.Burst
	if burst <= 0 || rule.Algorithm != TokenBucket {
		burst = rule.Limit
	}
	window := int64(rule.Window / time.Millisecond) // rounded up, without overflow
	if rule.Window%time.Millisecond != 0 {
		window++
	}
	switch {
	case rule.Limit <= 0 || rule.Window < time.Millisecond:
		return nil, fmt.Errorf("limiter: redis: rule needs Limit > 0 and Window >= 1ms, got %d per %v", rule.Limit, rule.Window)
	case max(rule.Limit, burst) > math.MaxUint32 || max(rule.Limit, burst) > maxExact/window:
		return nil, fmt.Errorf("limiter: redis: limit %d per %v is too large: it must be below 2^32, and limit × window in ms at most 2^51", max(rule.Limit, burst), rule.Window)
	case cost < 0:
		return nil, fmt.Errorf("limiter: redis: cost %d is negative", cost)
	}
	now := int64(-1) // the server's TIME
	if s.clock != nil {
		now = max(0, s.clock().UnixMilli())
	}
	res, err := scripts[rule.Algorithm].Run(ctx, s.client, []string{key},
		rule.Limit, burst, window, cost, now, mode, countedIn).Slice()
	if err != nil {
		return nil, fmt.Errorf("limiter: redis %s %q: %w", mode, key, err)
	}
	return res, nil
}

// Take decides a request of cost units for key under rule, and counts it if
// it is admitted, in one round trip.
func (s *Store) Take(ctx context.Context, key string, rule Rule, cost int64) (Result, error) {
	res, err := s.run(ctx, key, rule, cost, "take", 0)
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
		ResetAfter: span(v[3]),
		RetryAfter: span(v[4]),
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
	_, err := s.run(ctx, key, rule, cost, "refund", countedIn)
	return err
}

// span converts the scripts' milliseconds to a Duration, saturating just
// below Never (about 292 years).
func span(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms >= int64(Never/time.Millisecond):
		return Never - 1
	}
	return time.Duration(ms) * time.Millisecond
}
