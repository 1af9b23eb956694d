package redis

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/timestep"
)

// The wire format shared with the scripts: a call's request goes as one
// packed argument and its answer comes back as one packed string
// (little-endian, struct's layouts), so that neither side converts numbers
// to text and back. head.lua and tail.lua hold the layouts; what follows
// packs the request and reads the answer.

// Flags of a request (argFlags) and of an answer (resFlags), and the sizes
// of their packed forms; head.lua and tail.lua hold the layouts.
const (
	argRefund     = 1
	argServerTime = 2
	argPenalty    = 4 // with argRefund
	argReward     = 8 // with argRefund
	argUpTo       = 16
	argBlock      = 32  // the first rule's BlockFor follows the rules
	argGap        = 64  // the first rule's MinInterval follows them (and BlockFor)
	argIdempotent = 128 // an idempotent take ("once" in head.lua): its record's lifetime follows all
	argBlockSize  = 6   // each
	resGrantSize  = 5   // what an up-to take granted, after the rules' parts
	resWaitSize   = 6   // a take with a turn's wait (ms), after the rules' parts
	resAllowed    = 1
	argHeadSize   = 1 + 5 + 6
	argRuleSize   = 4 + 4 + 7 + 4 + 7
	resHeadSize   = 1
	resRuleSize   = 4 + 7 + 7 + 7
	// argMaxSize is the longest request before an idempotent take's
	// record lifetime: MaxRules rules, a BlockFor and a MinInterval.
	argMaxSize = argHeadSize + redisengine.MaxRules*argRuleSize + 2*argBlockSize
)

// The largest values the packed forms hold: 2^56-1 (7 bytes), 2^48-1 (6).
const (
	max7 = 1<<56 - 1
	max6 = 1<<48 - 1
)

// pack lays out a call's argument in arg: the flags, the cost and the time
// (the engine's clock, or none for the server's TIME), then each rule's
// limit, capacity, window and step, and the window that counted names for
// a refund. Rules are checked (see checkRule).
func (e *engine) pack(arg *[argMaxSize]byte, rules []redisengine.Rule, cost int64, flags byte, counted []redisengine.Result) ([]byte, error) {
	alg := rules[0].Algorithm
	most, total := int64(0), int64(0) // the largest quota of the rules, and their sum
	for i, rule := range rules {
		window, step, err := checkRule(rule, alg)
		if err != nil {
			return nil, err
		}
		most = max(most, rule.Max, capacity(rule))
		if total += rule.Max; alg == redisengine.SlidingLog && total > redisengine.MaxLogLimit {
			return nil, fmt.Errorf("limits adding up to more than %d are too large for SlidingLog: a key keeps one entry per unit, at most %d in all", redisengine.MaxLogLimit, redisengine.MaxLogLimit)
		}
		countedIn := int64(0)
		if counted != nil {
			// A countedIn outside what a script can have returned matches
			// nothing and credits as much as any later time.
			countedIn = min(max(0, counted[i].CountedIn), max7)
		}
		p := arg[argHeadSize+i*argRuleSize:]
		binary.LittleEndian.PutUint32(p, uint32(rule.Max))
		binary.LittleEndian.PutUint32(p[4:], uint32(capacity(rule)))
		putUint(p[8:15], uint64(window))
		binary.LittleEndian.PutUint32(p[15:], uint32(step))
		putUint(p[19:26], uint64(countedIn))
	}
	// A cost above a rule's quota is never admitted under it, a refund or a
	// penalty of it counts the whole quota, and a reward of it gives back
	// both windows of a sliding window: the scripts decide the same for
	// twice the largest quota + 1, which fits.
	cost = min(cost, 2*most+1)
	now := int64(0)
	if e.clock == nil {
		flags |= argServerTime
	} else {
		now = min(max(0, e.clock().UnixMilli()), max6)
	}
	size := argHeadSize + len(rules)*argRuleSize
	for _, f := range [...]struct {
		flag byte
		d    time.Duration
	}{{argBlock, rules[0].BlockFor}, {argGap, rules[0].MinInterval}} {
		if f.d > 0 {
			flags |= f.flag
			putUint(arg[size:size+argBlockSize], uint64(min(max(1, timestep.Millis(f.d)), max6)))
			size += argBlockSize
		}
	}
	arg[0] = flags
	putUint(arg[1:6], uint64(cost))
	putUint(arg[6:12], uint64(now))
	return arg[:size], nil
}

// checkRule validates r, a rule of a call whose rules are all of alg, and
// returns its window in steps (rounded up) and its step in ms (see
// Rule.Step).
func checkRule(r redisengine.Rule, alg redisengine.Algorithm) (window, step int64, err error) {
	if r.Algorithm < redisengine.FixedWindow || r.Algorithm > redisengine.SlidingLog {
		return 0, 0, fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	if r.Algorithm != alg {
		return 0, 0, fmt.Errorf("rules of algorithms %d and %d in one call; give rules of one algorithm", alg, r.Algorithm)
	}
	if r.Max <= 0 || r.Expiration < time.Millisecond || r.Burst < 0 || r.Step < 0 {
		return 0, 0, fmt.Errorf("rule needs Max > 0, Burst >= 0, Step >= 0 and Expiration >= 1ms, got %d (burst %d) per %v", r.Max, r.Burst, r.Expiration)
	}
	quota := max(r.Max, capacity(r))
	if alg == redisengine.SlidingLog && quota > redisengine.MaxLogLimit {
		return 0, 0, fmt.Errorf("limit %d is too large for SlidingLog: it must be at most %d (one entry per unit)", quota, redisengine.MaxLogLimit)
	}
	if quota > math.MaxUint32 {
		return 0, 0, fmt.Errorf("limit %d is too large: it must be below 2^32", quota)
	}
	ms := timestep.Millis(r.Expiration)
	step = timestep.For(quota, ms)
	if r.Step > 0 {
		step = timestep.Millis(r.Step)
	}
	window = timestep.Steps(ms, step)
	if step > math.MaxUint32 || quota > timestep.MaxProduct/window {
		return 0, 0, fmt.Errorf("limit %d per %v in steps of %v is too fine: limit × window in steps must be at most 2^51, with a step below 2^32 ms; leave Step 0 to have it chosen", quota, r.Expiration, r.Step)
	}
	return window, step, nil
}

// capacity is the quota a decision under r is made against: Burst for a
// token bucket that sets one, else Max.
func capacity(r redisengine.Rule) int64 {
	if r.Algorithm == redisengine.TokenBucket && r.Burst > 0 {
		return r.Burst
	}
	return r.Max
}

// decodeResults reads a script's answer for rules into results, and
// returns whether the request was admitted.
func decodeResults(res string, rules []redisengine.Rule, results []redisengine.Result) (bool, error) {
	if len(res) != resHeadSize+len(rules)*resRuleSize {
		return false, fmt.Errorf("limiter: redis: script returned %d bytes, want %d", len(res), resHeadSize+len(rules)*resRuleSize)
	}
	allowed := res[0]&resAllowed != 0
	for i, rule := range rules {
		p := res[resHeadSize+i*resRuleSize:]
		results[i] = redisengine.Result{
			Allowed:    allowed,
			Limit:      capacity(rule),
			Remaining:  getUint(p[0:4]),
			ResetAfter: span(getUint(p[4:11])),
			RetryAfter: span(getUint(p[11:18])),
			CountedIn:  getUint(p[18:25]),
		}
		if res[0]&(2<<i) != 0 {
			results[i].RetryAfter = timestep.Never
		}
	}
	return allowed, nil
}

// putUint writes v little-endian into b, as struct's I<len(b)>.
func putUint(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// getUint reads a little-endian unsigned integer of len(b) bytes.
func getUint(b string) int64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return int64(v)
}

// span converts the scripts' milliseconds to a Duration, saturating just
// below Never (about 292 years).
func span(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms >= int64(timestep.Never/time.Millisecond):
		return timestep.Never - 1
	}
	return time.Duration(ms) * time.Millisecond
}
