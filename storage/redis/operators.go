package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/timestep"
)

// The second argument of an operator's call (see head.lua): a peek, or a
// block followed by its length.
const (
	argPeek       = "p"
	argBlockOp    = 'b'
	resHeldSize   = 6 // an operator call's rest of a hold, a block or a gap (ms), after the rules' parts
	maxHoldMillis = 365 * 24 * 3600 * 1000
)

// PeekAll reads key's state under every rule as a take of cost 1 would
// find it, and counts and writes nothing; see redisengine.Engine.
func (e *engine) PeekAll(ctx context.Context, key string, rules []redisengine.Rule, results []redisengine.Result) (time.Duration, error) {
	return e.operate(ctx, "peek", key, rules, argPeek, results)
}

// BlockAll holds key off for d whatever its counts, and then reads it as
// PeekAll does; see redisengine.Engine.
func (e *engine) BlockAll(ctx context.Context, key string, rules []redisengine.Rule, d time.Duration, results []redisengine.Result) (time.Duration, error) {
	ms := timestep.Millis(d)
	if d <= 0 || ms > maxHoldMillis {
		return 0, fmt.Errorf("limiter: redis block: d is %v; it must be above 0 and at most 365 days", d)
	}
	var arg [1 + argBlockSize]byte
	arg[0] = argBlockOp
	putUint(arg[1:], uint64(ms))
	return e.operate(ctx, "block", key, rules, string(arg[:]), results)
}

// Reset deletes key's states, and with them its hold, block and gap; see
// redisengine.Engine.
func (e *engine) Reset(ctx context.Context, key string) error {
	if err := e.calls.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("limiter: redis reset: %w", err)
	}
	return nil
}

// operate makes an operator's call (op, the script's second argument) and
// decodes its answer.
func (e *engine) operate(ctx context.Context, mode, key string, rules []redisengine.Rule, op string, results []redisengine.Result) (time.Duration, error) {
	if len(results) < len(rules) {
		return 0, fmt.Errorf("limiter: redis %s: %d results for %d rules", mode, len(results), len(rules))
	}
	if len(rules) == 0 || len(rules) > redisengine.MaxRules {
		return 0, fmt.Errorf("limiter: redis %s: %d rules; give 1 to %d", mode, len(rules), redisengine.MaxRules)
	}
	var buf [argMaxSize]byte
	packed, err := e.pack(&buf, rules, 1, 0, nil)
	if err != nil {
		return 0, fmt.Errorf("limiter: redis %s: %w", mode, err)
	}
	res, err := runScriptArgs(ctx, e.calls, rules[0].Algorithm, []string{key}, string(packed), op).Result()
	if err != nil {
		return 0, fmt.Errorf("limiter: redis %s: %w", mode, err)
	}
	if len(res) < resHeldSize {
		return 0, fmt.Errorf("limiter: redis: script returned %d bytes for a %s", len(res), mode)
	}
	if _, err := decodeResults(res[:len(res)-resHeldSize], rules, results); err != nil {
		return 0, err
	}
	return span(getUint(res[len(res)-resHeldSize:])), nil
}
