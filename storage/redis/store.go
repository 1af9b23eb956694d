// Package redis is an atomic rate limiter on Redis: each decision is made
// by a script, with the state of a limited key in one Redis key, so that
// any number of processes sharing a Redis (or a Redis Cluster) admit
// exactly the limit together. Decisions made at the same time share
// pipelines, and the decisions a pipeline carries to one node are made by
// one call of a batch script (see WithoutPipelining and WithoutBatching).
// It is the Redis backend of github.com/fiberlimit/limiter and usable on
// its own over any redis.UniversalClient of go-redis v9.
//
// Each algorithm is a Lua script (fixed_window.lua, sliding_window.lua,
// token_bucket.lua and sliding_log.lua, after its sliding_log_prelude.lua,
// each between head.lua and tail.lua) run with EVALSHA, falling back to
// EVAL when the server does not have it (after a restart or SCRIPT FLUSH).
// Time comes from the server's TIME unless WithClock is given, so processes
// with skewed clocks agree; time is kept in milliseconds. Every write sets a
// TTL of exactly the time the state still matters; nothing is stored
// without one. Redis 6 or later.
package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
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
	//go:embed sliding_log_prelude.lua
	slidingLogPreludeLua string
	//go:embed sliding_log.lua
	slidingLogLua string
	//go:embed forget_once.lua
	forgetOnceLua string
)

// forgetOnceScript is the script of ForgetOnce.
var forgetOnceScript = redis.NewScript(forgetOnceLua)

// scriptSources are the scripts of the algorithms, and scripts their
// SHA-1 digests for EVALSHA.
var (
	scriptSources = [...]string{
		FixedWindow:   stateSizes(10, 10) + headLua + fixedWindowLua + tailLua,
		SlidingWindow: stateSizes(14, 12) + headLua + slidingWindowLua + tailLua,
		TokenBucket:   stateSizes(13, 11) + headLua + tokenBucketLua + tailLua,
		SlidingLog:    stateSizes(-1, -1) + slidingLogPreludeLua + headLua + slidingLogLua + tailLua,
	}
	scripts = [...]*redis.Script{
		FixedWindow:   redis.NewScript(scriptSources[FixedWindow]),
		SlidingWindow: redis.NewScript(scriptSources[SlidingWindow]),
		TokenBucket:   redis.NewScript(scriptSources[TokenBucket]),
		SlidingLog:    redis.NewScript(scriptSources[SlidingLog]),
	}
)

// stateSizes is the line that begins an algorithm's script: the bytes of
// a limit's state in a value (per, n limits of them) and of a lone limit's
// (one), which head.lua reads a value's layout by.
func stateSizes(per, one int) string {
	return fmt.Sprintf("local state_size, state_size1 = %d, %d\n", per, one)
}

// Store decides rate limits in Redis. It is safe for concurrent use.
type Store struct {
	client   redis.UniversalClient // as given to New
	calls    redis.UniversalClient // what the scripts go through: see withDeadlines
	attempts *attempts             // nil for other than a plain Client
	clock    func() time.Time
	pipes    *pipelines // nil with WithoutPipelining

	unpipelined bool
	unbatched   bool
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

// WithoutPipelining makes every call its own round trip. By default, calls
// made at the same time share pipelines (see PipelineStats): a call that
// finds fewer than 2×GOMAXPROCS (at least 4) writes in flight to its Redis
// node goes out at once, alone, as it would without pipelining, and calls
// that find them all busy go together in the next write to that node,
// without a timer. On a ClusterClient or Ring, each node (each shard) has
// pipelines of its own, so a slow node delays only its own keys.
//
// Resends. go-redis sends a call again after a network error or a read
// timeout (a Redis slower than the client's ReadTimeout) while its retry
// budget (a Client's MaxRetries, 3 by default) and the call's context
// allow, and a call that Redis had already run then counts twice. It sends
// a pipeline again whole, so pipelined that can be every call of the write
// rather than one. A read timeout that comes from the call's own deadline
// is not resent; the limiter gives every call its StorageTimeout, well
// below the default ReadTimeout. A Client with MaxRetries -1 never
// resends. A pipeline handed to another goroutine reads its replies under
// the latest deadline of its callers still waiting (none if one has none),
// but once one of those callers leaves (its deadline passes or its context
// is cancelled), go-redis no longer sends it again or waits for a
// connection for it: no call is sent again for a caller that has left,
// though a caller with a later deadline in the same write may then get an
// error sooner than it would alone. A call whose caller left while its
// script was missing (NOSCRIPT) is not sent again as EVAL.
//
// Cluster and Ring. Pipelines go through each node's (each shard's) own
// client, which retries as ClusterOptions.MaxRetries says (not at all by
// default; a Ring's shards never do). A call that did not run there
// (MOVED, ASK, CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, READONLY, or a
// call that never left) goes again through the ClusterClient or Ring. Hooks
// added to the ClusterClient or Ring itself do not see pipelined calls:
// add them to every node through OnNewNode, as redisotel does, or use
// WithoutPipelining. On a plain Client, pipelined calls reach a hook's
// ProcessPipelineHook, not its ProcessHook. The Store keeps one small
// batcher per node address it has sent to, for as long as it lives, also
// for addresses that have left the cluster or ring.
func WithoutPipelining() Option {
	return func(s *Store) { s.unpipelined = true }
}

// WithoutBatching keeps pipelining (see WithoutPipelining) but sends each
// call of a pipeline as a script call of its own, instead of one batch
// script call per algorithm and hash slot deciding many: Redis then spends a script dispatch and a TIME on every call,
// and a hook sees one EVALSHA per decision. Use it behind a proxy that
// routes a script call by its first key to one of several Redis servers
// (twemproxy, Envoy's Redis proxy) through a plain Client: a batch's other
// keys may belong to another server. A ClusterClient or Ring needs no such
// care: their batches hold one hash slot, or one shard.
func WithoutBatching() Option {
	return func(s *Store) { s.unbatched = true }
}

// New returns a Store over client, which may be a plain, cluster, ring or
// failover client.
//
// Deadlines. Every call returns by its context's deadline. A ClusterClient
// or Ring does so only with ContextTimeoutEnabled set (otherwise a call
// waits up to its ReadTimeout, 3 s by default). A plain or failover Client
// made without it (as gofiber/storage/redis makes its client) is used for
// Take and Refund through a copy that Client.WithTimeout makes, sharing the
// client's connections, with ContextTimeoutEnabled set on the copy alone.
// go-redis does not carry a client's hooks over to such a copy: to have
// hooks (redisotel, say) see the Store's calls, make the client with
// ContextTimeoutEnabled, and it is used as it is. On the copy, a call that
// its deadline ends while go-redis retries a failed connection returns the
// error of that attempt (a reset connection, say) along with the
// context's.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client}
	s.calls, s.attempts = withDeadlines(client)
	for _, o := range opts {
		o(s)
	}
	if !s.unpipelined {
		s.pipes = newPipelines(s.calls, !s.unbatched)
	}
	return s
}

// Conn returns the client given to New.
func (s *Store) Conn() redis.UniversalClient { return s.client }

// MaxRules is the most rules TakeAll and RefundAll decide together.
const MaxRules = 7

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
	argOnce       = 128 // a take once per request: its record's lifetime follows all
	argBlockSize  = 6   // each
	resGrantSize  = 5   // what an up-to take granted, after the rules' parts
	resAllowed    = 1
	argHeadSize   = 1 + 5 + 6
	argRuleSize   = 4 + 4 + 7 + 4 + 7
	resHeadSize   = 1
	resRuleSize   = 4 + 7 + 7 + 7
)

// The largest values the packed forms hold: 2^56-1 (7 bytes), 2^48-1 (6).
const (
	max7 = 1<<56 - 1
	max6 = 1<<48 - 1
)

// run calls the rules' script for key: a take, or with argRefund a refund
// in the windows that counted names, in one round trip. The request goes as
// one packed argument and a take's answer comes back as one packed string,
// so that neither side converts numbers to text and back. It returns the
// answer of a take.
func (s *Store) run(ctx context.Context, key string, rules []Rule, cost int64, flags byte, counted []Result) (string, error) {
	mode := "take"
	switch {
	case flags&argPenalty != 0:
		mode = "penalize"
	case flags&argReward != 0:
		mode = "reward"
	case flags&argRefund != 0:
		mode = "refund"
	}
	if len(rules) == 0 || len(rules) > MaxRules {
		return "", fmt.Errorf("limiter: redis %s: %d rules; give 1 to %d", mode, len(rules), MaxRules)
	}
	if cost < 0 {
		return "", fmt.Errorf("limiter: redis %s: cost %d is negative", mode, cost)
	}
	var buf [argHeadSize + MaxRules*argRuleSize + 2*argBlockSize]byte
	packed, err := s.pack(&buf, rules, cost, flags, counted)
	if err != nil {
		return "", fmt.Errorf("limiter: redis %s: %w", mode, err)
	}
	alg := rules[0].Algorithm
	var res string
	mark := s.attempts.mark()
	if s.pipes != nil {
		res, err = s.pipes.run(ctx, alg, key, packed)
	} else {
		res, err = runScript(ctx, s.calls, alg, key, string(packed)).Result()
	}
	if err != nil {
		// The key is left out: it may be a client's token, and it may be
		// large.
		if errors.Is(err, context.DeadlineExceeded) {
			if cause := s.attempts.since(mark); cause != nil {
				return "", fmt.Errorf("limiter: redis %s: %w, until the call's deadline passed (%w)", mode, cause, err)
			}
		}
		return "", fmt.Errorf("limiter: redis %s: %w", mode, err)
	}
	return res, nil
}

// pack lays out a call's argument in arg: the flags, the cost and the time
// (the Store's clock, or none for the server's TIME), then each rule's
// limit, capacity, window and step, and the window that counted names for
// a refund. Rules are checked (see Rule.check).
func (s *Store) pack(arg *[argHeadSize + MaxRules*argRuleSize + 2*argBlockSize]byte, rules []Rule, cost int64, flags byte, counted []Result) ([]byte, error) {
	alg := rules[0].Algorithm
	most, total := int64(0), int64(0) // the largest quota of the rules, and their sum
	for i, rule := range rules {
		window, step, err := rule.check(alg)
		if err != nil {
			return nil, err
		}
		most = max(most, rule.Limit, rule.capacity())
		if total += rule.Limit; alg == SlidingLog && total > MaxLogLimit {
			return nil, fmt.Errorf("limits adding up to more than %d are too large for SlidingLog: a key keeps one entry per unit, at most %d in all", MaxLogLimit, MaxLogLimit)
		}
		countedIn := int64(0)
		if counted != nil {
			// A countedIn outside what a script can have returned matches
			// nothing and credits as much as any later time.
			countedIn = min(max(0, counted[i].CountedIn), max7)
		}
		p := arg[argHeadSize+i*argRuleSize:]
		binary.LittleEndian.PutUint32(p, uint32(rule.Limit))
		binary.LittleEndian.PutUint32(p[4:], uint32(rule.capacity()))
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
	if s.clock == nil {
		flags |= argServerTime
	} else {
		now = min(max(0, s.clock().UnixMilli()), max6)
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

// check validates a rule of a call whose rules are all of alg, and returns
// its window in steps (rounded up) and its step in ms (see Rule.Step).
func (r Rule) check(alg Algorithm) (window, step int64, err error) {
	if r.Algorithm < FixedWindow || r.Algorithm > SlidingLog {
		return 0, 0, fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	if r.Algorithm != alg {
		return 0, 0, fmt.Errorf("rules of algorithms %d and %d in one call; give rules of one algorithm", alg, r.Algorithm)
	}
	if r.Limit <= 0 || r.Window < time.Millisecond || r.Burst < 0 || r.Step < 0 {
		return 0, 0, fmt.Errorf("rule needs Limit > 0, Burst >= 0, Step >= 0 and Window >= 1ms, got %d (burst %d) per %v", r.Limit, r.Burst, r.Window)
	}
	quota := max(r.Limit, r.capacity())
	if alg == SlidingLog && quota > MaxLogLimit {
		return 0, 0, fmt.Errorf("limit %d is too large for SlidingLog: it must be at most %d (one entry per unit)", quota, MaxLogLimit)
	}
	if quota > math.MaxUint32 {
		return 0, 0, fmt.Errorf("limit %d is too large: it must be below 2^32", quota)
	}
	ms := timestep.Millis(r.Window)
	step = timestep.For(quota, ms)
	if r.Step > 0 {
		step = timestep.Millis(r.Step)
	}
	window = timestep.Steps(ms, step)
	if step > math.MaxUint32 || quota > timestep.MaxProduct/window {
		return 0, 0, fmt.Errorf("limit %d per %v in steps of %v is too fine: limit × window in steps must be at most 2^51, with a step below 2^32 ms; leave Step 0 to have it chosen", quota, r.Window, r.Step)
	}
	return window, step, nil
}

// runScript calls alg's script for key with arg in one round trip: EVALSHA,
// or after a restart or SCRIPT FLUSH, when the server answers NOSCRIPT,
// EVAL.
func runScript(ctx context.Context, client redis.UniversalClient, alg Algorithm, key, arg string) *redis.StringCmd {
	return runScriptWith(ctx, client, alg, arg, key)
}

// runScriptOnce is runScript for a take once per request, whose answer is
// kept in record, a key of key's hash slot.
func runScriptOnce(ctx context.Context, client redis.UniversalClient, alg Algorithm, key, record, arg string) *redis.StringCmd {
	return runScriptWith(ctx, client, alg, arg, key, record)
}

// runScriptWith is runScript with the keys of the call: the limited key,
// then any other the call reads or writes.
func runScriptWith(ctx context.Context, client redis.UniversalClient, alg Algorithm, arg string, keys ...string) *redis.StringCmd {
	cmd := scriptCmd(ctx, "evalsha", scripts[alg].Hash(), arg, keys...)
	_ = client.Process(ctx, cmd)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = scriptCmd(ctx, "eval", scriptSources[alg], arg, keys...)
		_ = client.Process(ctx, cmd)
	}
	return cmd
}

// slotTags are, for each Redis Cluster hash slot, a hash tag ("{n}") whose
// keys lie in that slot: made once, when a take once first needs one.
var slotTags = sync.OnceValue(func() *[16384]string {
	// About 170,000 numbers are tried: each without an allocation, so
	// that the table takes a few ms, well within a first call's timeout.
	var tags [16384]string
	left := len(tags)
	buf := []byte{'{'}
	for n := 0; left > 0; n++ {
		buf = strconv.AppendInt(buf[:1], int64(n), 10)
		if s := int(crc16(buf[1:])) % 16384; tags[s] == "" {
			tags[s], left = string(append(buf, '}')), left-1
		}
	}
	return &tags
})

// recordKeyOf is the name a take once keeps its answer under: record, in
// key's hash slot. A record that is there already (its prefix and key's
// share a hash tag) is used as it is; one without a '{' gets the slot's tag
// at its end, so that it keeps its prefix (for ACLs and scans by prefix);
// any other gets the tag in front.
func recordKeyOf(key, record string) string {
	slot := hashSlot(key)
	switch {
	case hashSlot(record) == slot:
		return record
	case strings.IndexByte(record, '{') < 0:
		return record + slotTag(slot)
	}
	return slotTag(slot) + record
}

// slotTag is the hash tag of slot.
func slotTag(slot int) string { return slotTags()[slot] }

// scriptCmd is EVAL or EVALSHA (name) of script with keys and arg.
func scriptCmd(ctx context.Context, name, script, arg string, keys ...string) *redis.StringCmd {
	args := make([]any, 0, 4+len(keys))
	args = append(args, name, script, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	cmd := redis.NewStringCmd(ctx, append(args, arg)...)
	cmd.SetFirstKeyPos(3) // for Redis Cluster's routing: the limited key
	return cmd
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

// Take decides a request of cost units for key under rule, and counts it if
// it is admitted, in one round trip.
func (s *Store) Take(ctx context.Context, key string, rule Rule, cost int64) (Result, error) {
	var res [1]Result
	_, err := s.TakeAll(ctx, key, []Rule{rule}, cost, res[:])
	return res[0], err
}

// TakeAll decides a request of cost units for key under every rule at once
// (say 10 per second and 1000 per hour), in one round trip: it is admitted
// when each rule admits it, and then counted under each; a request that
// any rule rejects is counted under none. The states of all the rules live
// in one Redis key, so the rules of a key must be the same, in the same
// order, on every call. results[i] gets rule i's part: Allowed as the
// whole decision, its Limit, Remaining and ResetAfter, and RetryAfter, the
// time until rule i would admit the request (0 when it would now). The
// request can be admitted again after the longest RetryAfter. All rules
// are of one Algorithm; give 1 to MaxRules of them, and results at least
// as long.
func (s *Store) TakeAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) (bool, error) {
	if len(results) < len(rules) {
		return false, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	res, err := s.run(ctx, key, rules, cost, 0, nil)
	if err != nil {
		return false, err
	}
	return decodeResults(res, rules, results)
}

// TakeOnceAll is TakeAll made once per request: record names where an
// admitted call's answer is kept, for ttl (rounded up to whole ms, at most
// 2^48-1 ms), and a call with the same record within ttl gets that answer
// again, counts nothing and reports repeat, up to 8 repeats (the next
// counts as a new call). A rejection is not kept: it counted nothing, and
// its retry is decided afresh. The check, the take and the record are one
// script call, so replicas that send the same request at once count it
// once. The record is a key of its own, in key's hash slot (Cluster) and
// sent to key's server (Ring): record as it is when it shares key's hash
// tag, else record with the slot's hash tag added at its end (or, when
// record holds a '{', in front). Give each request a record
// of its own, such as a digest of key and the request's Idempotency-Key,
// under a name that no key you limit can take: a client that chooses its
// key must not be able to choose a record's name (a record is told from
// another value by a tag and its exact length, but the name is what keeps
// a client's own state out of it). A call once per request is not batched
// with others.
func (s *Store) TakeOnceAll(ctx context.Context, key, record string, ttl time.Duration, rules []Rule, cost int64, results []Result) (allowed, repeat bool, err error) {
	if len(results) < len(rules) {
		return false, false, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	if len(rules) == 0 || len(rules) > MaxRules {
		return false, false, fmt.Errorf("limiter: redis take: %d rules; give 1 to %d", len(rules), MaxRules)
	}
	if cost < 0 || ttl <= 0 {
		return false, false, fmt.Errorf("limiter: redis take: cost %d and ttl %v; a take once needs a cost >= 0 and a ttl > 0", cost, ttl)
	}
	var buf [argHeadSize + MaxRules*argRuleSize + 2*argBlockSize]byte
	packed, err := s.pack(&buf, rules, cost, 0, nil)
	if err != nil {
		return false, false, fmt.Errorf("limiter: redis take: %w", err)
	}
	packed[0] |= argOnce
	arg := make([]byte, len(packed)+argBlockSize)
	copy(arg, packed)
	putUint(arg[len(packed):], uint64(min(timestep.Millis(ttl), max6)))
	recordKey := recordKeyOf(key, record)
	alg := rules[0].Algorithm
	cmd := runScriptOnce(ctx, s.calls, alg, key, recordKey, string(arg))
	res, err := cmd.Result()
	if err != nil {
		return false, false, fmt.Errorf("limiter: redis take: %w", err)
	}
	if want := resHeadSize + len(rules)*resRuleSize; len(res) == want+1 {
		res, repeat = res[:want], true
	}
	allowed, err = decodeResults(res, rules, results)
	return allowed, repeat, err
}

// ForgetOnce makes the record that TakeOnceAll keeps for key under
// record answer no more repeats, so that a retry of that request is
// decided, and counted, as a new one: for a take whose cost is to be given back (RefundAll), whose
// retries would otherwise repeat its admission for free. A record that has
// already answered repeats stays, and ForgetOnce reports repeated: those
// repeats were served on the take, so its cost must not be given back.
// One script call, routed by key as the take is.
func (s *Store) ForgetOnce(ctx context.Context, key, record string) (repeated bool, err error) {
	n, err := forgetOnceScript.Run(ctx, s.calls, []string{key, recordKeyOf(key, record)}).Int()
	if err != nil {
		return false, fmt.Errorf("limiter: redis forget a take once: %w", err)
	}
	return n == 1, nil
}

// TakeUpToAll takes as much of cost as every rule has room for now, in
// one round trip, and returns how much that was: a batch of jobs that
// takes what it can, say. When no rule has room for one unit, it is a
// rejected take of 1, whose RetryAfter says when one unit fits; when cost
// is 0, an admitted take of 0. results are as TakeAll's; rules as given to
// TakeAll.
func (s *Store) TakeUpToAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) (granted int64, err error) {
	if len(results) < len(rules) {
		return 0, fmt.Errorf("limiter: redis take: %d results for %d rules", len(results), len(rules))
	}
	res, err := s.run(ctx, key, rules, cost, argUpTo, nil)
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

// decodeResults reads a script's answer for rules into results, and
// returns whether the request was admitted.
func decodeResults(res string, rules []Rule, results []Result) (bool, error) {
	if len(res) != resHeadSize+len(rules)*resRuleSize {
		return false, fmt.Errorf("limiter: redis: script returned %d bytes, want %d", len(res), resHeadSize+len(rules)*resRuleSize)
	}
	allowed := res[0]&resAllowed != 0
	for i, rule := range rules {
		p := res[resHeadSize+i*resRuleSize:]
		results[i] = Result{
			Allowed:    allowed,
			Limit:      rule.capacity(),
			Remaining:  getUint(p[0:4]),
			ResetAfter: span(getUint(p[4:11])),
			RetryAfter: span(getUint(p[11:18])),
			CountedIn:  getUint(p[18:25]),
		}
		if res[0]&(2<<i) != 0 {
			results[i].RetryAfter = Never
		}
	}
	return allowed, nil
}

// Refund credits cost units of an admitted request back to key, in the
// window that countedIn (from its Result) names, if that window still
// counts. One round trip.
func (s *Store) Refund(ctx context.Context, key string, rule Rule, cost int64, countedIn int64) error {
	_, err := s.run(ctx, key, []Rule{rule}, cost, argRefund, []Result{{CountedIn: countedIn}})
	return err
}

// RefundAll credits cost units of a request that TakeAll admitted back to
// key under every rule, each in the window its result (from TakeAll) names,
// if that window still counts, and then sets the results to the state the
// refund leaves, as a Take of cost 0 would see it. One round trip; rules
// as given to TakeAll.
func (s *Store) RefundAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) error {
	if len(results) < len(rules) {
		return fmt.Errorf("limiter: redis refund: %d results for %d rules", len(results), len(rules))
	}
	res, err := s.run(ctx, key, rules, cost, argRefund, results)
	if err != nil {
		return err
	}
	_, err = decodeResults(res, rules, results)
	return err
}

// PenalizeAll counts cost units against key under every rule, whether or
// not they have room: a failed login that should cost 5, say. Each rule
// counts at most its whole quota, so a key is never held off for longer
// than the rule itself would hold it. results are set to the state it
// leaves, as a Take of cost 0 would see it. One round trip; rules as given
// to TakeAll.
func (s *Store) PenalizeAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) error {
	return s.adjust(ctx, key, rules, cost, argRefund|argPenalty, results)
}

// RewardAll gives cost units back to key under every rule, from what it
// has spent now, whichever window counted them (a solved captcha, say),
// and sets results as PenalizeAll does. One round trip; rules as given to
// TakeAll.
func (s *Store) RewardAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) error {
	return s.adjust(ctx, key, rules, cost, argRefund|argReward, results)
}

// adjust runs a penalty or a reward (flags) and decodes its answer.
func (s *Store) adjust(ctx context.Context, key string, rules []Rule, cost int64, flags byte, results []Result) error {
	if len(results) < len(rules) {
		return fmt.Errorf("limiter: redis adjust: %d results for %d rules", len(results), len(rules))
	}
	res, err := s.run(ctx, key, rules, cost, flags, nil)
	if err != nil {
		return err
	}
	_, err = decodeResults(res, rules, results)
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
