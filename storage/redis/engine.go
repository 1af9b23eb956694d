package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/redis/go-redis/v9"
)

// engine makes the script calls of a Store: the methods of
// redisengine.Engine, which quota reaches through the hooks set below, and
// which this package does not export (its public API is the Store, a
// fiber.Storage). It is safe for concurrent use.
type engine struct {
	client   redis.UniversalClient // as given to New
	calls    redis.UniversalClient // what the scripts go through: see withDeadlines
	attempts *attempts             // nil for other than a plain Client
	clock    func() time.Time      // nil: the server's TIME (see WithClock)
	pipes    *pipelines            // nil with WithoutPipelining

	unpipelined bool // see WithoutPipelining
	unbatched   bool // see WithoutBatching
}

var _ redisengine.Engine = (*engine)(nil)

func init() {
	redisengine.Open = func(client redis.UniversalClient, clock func() time.Time) redisengine.Engine {
		e := &engine{client: client, clock: clock}
		e.open()
		return e
	}
	redisengine.OfStore = func(storage any) redisengine.Engine {
		if s, ok := storage.(*Store); ok && s != nil && s.engine != nil {
			return s.engine
		}
		return nil
	}
}

// open readies e, its client and options set, for calls.
func (e *engine) open() {
	e.calls, e.attempts = withDeadlines(e.client)
	if !e.unpipelined {
		e.pipes = newPipelines(e.calls, !e.unbatched)
	}
}

// Conn returns the client given to New.
func (e *engine) Conn() redis.UniversalClient { return e.client }

// run calls the rules' script for key: a take, or with argRefund an
// adjustment (a refund in the windows that counted names, a penalty or a
// reward), in one round trip (see wire.go). It returns the answer.
func (e *engine) run(ctx context.Context, key string, rules []redisengine.Rule, cost int64, flags byte, counted []redisengine.Result) (string, error) {
	mode := "take"
	switch {
	case flags&argPenalty != 0:
		mode = "penalize"
	case flags&argReward != 0:
		mode = "reward"
	case flags&argRefund != 0:
		mode = "refund"
	}
	if len(rules) == 0 || len(rules) > redisengine.MaxRules {
		return "", fmt.Errorf("limiter: redis %s: %d rules; give 1 to %d", mode, len(rules), redisengine.MaxRules)
	}
	if cost < 0 {
		return "", fmt.Errorf("limiter: redis %s: cost %d is negative", mode, cost)
	}
	var buf [argMaxSize]byte
	packed, err := e.pack(&buf, rules, cost, flags, counted)
	if err != nil {
		return "", fmt.Errorf("limiter: redis %s: %w", mode, err)
	}
	alg := rules[0].Algorithm
	var res string
	mark := e.attempts.mark()
	if e.pipes != nil {
		res, err = e.pipes.run(ctx, alg, key, packed)
	} else {
		res, err = runScript(ctx, e.calls, alg, key, string(packed)).Result()
	}
	if err != nil {
		// The key is left out: it may be a client's token, and it may be
		// large.
		if errors.Is(err, context.DeadlineExceeded) {
			if cause := e.attempts.since(mark); cause != nil {
				return "", fmt.Errorf("limiter: redis %s: %w, until the call's deadline passed (%w)", mode, cause, err)
			}
		}
		return "", fmt.Errorf("limiter: redis %s: %w", mode, err)
	}
	return res, nil
}

// Take is TakeAll under one rule.
func (e *engine) Take(ctx context.Context, key string, rule redisengine.Rule, cost int64) (redisengine.Result, error) {
	var res [1]redisengine.Result
	_, err := e.TakeAll(ctx, key, []redisengine.Rule{rule}, cost, res[:])
	return res[0], err
}

// TakeAll decides a request of cost units for key under every rule at
// once; see redisengine.Engine.
func (e *engine) TakeAll(ctx context.Context, key string, rules []redisengine.Rule, cost int64, results []redisengine.Result) (bool, error) {
	if len(results) < len(rules) {
		return false, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	res, err := e.run(ctx, key, rules, cost, 0, nil)
	if err != nil {
		return false, err
	}
	return decodeResults(res, rules, results)
}

// TakeUpToAll takes as much of cost as every rule has room for now; see
// redisengine.Engine.
func (e *engine) TakeUpToAll(ctx context.Context, key string, rules []redisengine.Rule, cost int64, results []redisengine.Result) (granted int64, err error) {
	if len(results) < len(rules) {
		return 0, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	res, err := e.run(ctx, key, rules, cost, argUpTo, nil)
	if err != nil {
		return 0, err
	}
	if len(res) < resGrantSize {
		return 0, fmt.Errorf("limiter: redis: script returned %d bytes for an up-to take", len(res))
	}
	if _, err := decodeResults(res[:len(res)-resGrantSize], rules, results); err != nil {
		return 0, err
	}
	return getUint(res[len(res)-resGrantSize:]), nil
}

// TakeTurnAll is TakeAll for a request that may wait up to maxDelay for
// its turn; see redisengine.Engine. It goes alone, never in a pipeline or
// a batch: its second argument is the delay.
func (e *engine) TakeTurnAll(ctx context.Context, key string, rules []redisengine.Rule, cost int64, maxDelay time.Duration, results []redisengine.Result) (bool, time.Duration, error) {
	if len(results) < len(rules) {
		return false, 0, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	if len(rules) == 0 || len(rules) > redisengine.MaxRules {
		return false, 0, fmt.Errorf("limiter: redis take: %d rules; give 1 to %d", len(rules), redisengine.MaxRules)
	}
	if cost < 0 || maxDelay < 0 || rules[0].BlockFor != 0 || rules[0].MinInterval != 0 {
		return false, 0, fmt.Errorf("limiter: redis take: cost %d, maxDelay %v, BlockFor %v and MinInterval %v; a take with a turn needs a cost and a delay >= 0, and neither BlockFor nor MinInterval",
			cost, maxDelay, rules[0].BlockFor, rules[0].MinInterval)
	}
	var buf [argMaxSize]byte
	packed, err := e.pack(&buf, rules, cost, 0, nil)
	if err != nil {
		return false, 0, fmt.Errorf("limiter: redis take: %w", err)
	}
	var delay [argBlockSize]byte
	putUint(delay[:], uint64(min(maxDelay.Milliseconds(), max6)))
	res, err := runScriptArgs(ctx, e.calls, rules[0].Algorithm, []string{key}, string(packed), string(delay[:])).Result()
	if err != nil {
		return false, 0, fmt.Errorf("limiter: redis take: %w", err)
	}
	if len(res) < resWaitSize {
		return false, 0, fmt.Errorf("limiter: redis: script returned %d bytes for a take with a turn", len(res))
	}
	allowed, err := decodeResults(res[:len(res)-resWaitSize], rules, results)
	if err != nil {
		return false, 0, err
	}
	return allowed, span(getUint(res[len(res)-resWaitSize:])), nil
}

// TakeIdempotentAll is TakeAll whose admission is kept for the request's
// repeats under record (see recordKeyOf); see redisengine.Engine. It goes
// alone, never in a pipeline or a batch.
func (e *engine) TakeIdempotentAll(ctx context.Context, key, record string, ttl time.Duration, rules []redisengine.Rule, cost int64, results []redisengine.Result) (allowed, repeat bool, err error) {
	if len(results) < len(rules) {
		return false, false, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	if len(rules) == 0 || len(rules) > redisengine.MaxRules {
		return false, false, fmt.Errorf("limiter: redis take: %d rules; give 1 to %d", len(rules), redisengine.MaxRules)
	}
	if cost < 0 || ttl <= 0 {
		return false, false, fmt.Errorf("limiter: redis take: cost %d and ttl %v; an idempotent take needs a cost >= 0 and a ttl > 0", cost, ttl)
	}
	var buf [argMaxSize]byte
	packed, err := e.pack(&buf, rules, cost, 0, nil)
	if err != nil {
		return false, false, fmt.Errorf("limiter: redis take: %w", err)
	}
	packed[0] |= argIdempotent
	arg := make([]byte, len(packed)+argBlockSize)
	copy(arg, packed)
	putUint(arg[len(packed):], uint64(min(timestep.Millis(ttl), max6)))
	alg := rules[0].Algorithm
	res, err := runScriptWith(ctx, e.calls, alg, string(arg), key, recordKeyOf(key, record)).Result()
	if err != nil {
		return false, false, fmt.Errorf("limiter: redis take: %w", err)
	}
	if want := resHeadSize + len(rules)*resRuleSize; len(res) == want+1 {
		res, repeat = res[:want], true
	}
	allowed, err = decodeResults(res, rules, results)
	return allowed, repeat, err
}

// ForgetRecord makes the record of an idempotent take answer no more
// repeats; see redisengine.Engine. One script call (forget_record.lua).
func (e *engine) ForgetRecord(ctx context.Context, key, record string) (repeated bool, err error) {
	n, err := forgetRecordScript.Run(ctx, e.calls, []string{key, recordKeyOf(key, record)}).Int()
	if err != nil {
		return false, fmt.Errorf("limiter: redis forget an idempotent take: %w", err)
	}
	return n == 1, nil
}

// Refund is RefundAll under one rule, with the CountedIn of the take.
func (e *engine) Refund(ctx context.Context, key string, rule redisengine.Rule, cost int64, countedIn int64) error {
	_, err := e.run(ctx, key, []redisengine.Rule{rule}, cost, argRefund, []redisengine.Result{{CountedIn: countedIn}})
	return err
}

// RefundAll credits cost units of an admitted take back to key, in the
// windows its results name; see redisengine.Engine.
func (e *engine) RefundAll(ctx context.Context, key string, rules []redisengine.Rule, cost int64, results []redisengine.Result) error {
	if len(results) < len(rules) {
		return fmt.Errorf("limiter: redis refund: %d results for %d rules", len(results), len(rules))
	}
	res, err := e.run(ctx, key, rules, cost, argRefund, results)
	if err != nil {
		return err
	}
	_, err = decodeResults(res, rules, results)
	return err
}

// PenalizeAll counts cost units against key whether or not they have
// room; see redisengine.Engine.
func (e *engine) PenalizeAll(ctx context.Context, key string, rules []redisengine.Rule, cost int64, results []redisengine.Result) error {
	return e.adjust(ctx, key, rules, cost, argRefund|argPenalty, results)
}

// RewardAll gives cost units back to key from what it has spent now; see
// redisengine.Engine.
func (e *engine) RewardAll(ctx context.Context, key string, rules []redisengine.Rule, cost int64, results []redisengine.Result) error {
	return e.adjust(ctx, key, rules, cost, argRefund|argReward, results)
}

// adjust runs a penalty or a reward (flags) and decodes its answer.
func (e *engine) adjust(ctx context.Context, key string, rules []redisengine.Rule, cost int64, flags byte, results []redisengine.Result) error {
	if len(results) < len(rules) {
		return fmt.Errorf("limiter: redis adjust: %d results for %d rules", len(results), len(rules))
	}
	res, err := e.run(ctx, key, rules, cost, flags, nil)
	if err != nil {
		return err
	}
	_, err = decodeResults(res, rules, results)
	return err
}

// pipelineStats is what Store.PipelineStats reports.
func (e *engine) pipelineStats() (pipelines, calls int64) {
	if e.pipes == nil {
		return 0, 0
	}
	return e.pipes.stats.pipelines.Load(), e.pipes.stats.calls.Load()
}
