// Package redisengine is the contract between quota and the Lua engine of
// storage/redis: the rules a call decides under, its results, and the
// Engine that makes the calls. The engine's code and its scripts live in
// storage/redis, which sets Open and OfStore when it is linked in (quota
// imports it for that); its public API is the Store, a fiber.Storage.
//
// A rule is a limit (quota.Limit: Max units per Expiration, Burst for the
// token bucket) as the engine decides it, in integer time steps. Every
// call is one script call on the key that holds the states of all the
// rules of a limited key, so a decision under several rules is atomic.
package redisengine

import (
	"context"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Algorithm selects how a Rule decides, numbered as quota.Algorithm.
type Algorithm uint8

const (
	// FixedWindow admits at most Max units per Expiration, the window starting
	// at the key's first counted request.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow admits while prev*(1-elapsed/Expiration) + cur + cost <= Max.
	SlidingWindow
	// TokenBucket holds Burst tokens, refilled at Max per Expiration.
	TokenBucket
	// SlidingLog keeps the time of every unit counted in the last Expiration
	// and admits while they, with the cost, stay within Max: exact over
	// any window. A key's value holds 6 bytes per unit counted, so the
	// Max of a call's rules add up to at most MaxLogLimit.
	SlidingLog
)

// MaxLogLimit is the largest Max of a SlidingLog rule, and of the
// Max of a call's rules together: a call reads and rewrites every entry
// of the key, which at 10,000 costs Redis about 0.3-0.6 ms. quota.MaxLogLimit
// is this value.
const MaxLogLimit = 10_000

// MaxRules is the most rules one call decides together, set by the wire
// format: the first byte of a script's answer holds the admission (bit 0)
// and, for each rule i, whether it can never admit the request (bit i+1),
// so 7 rules. quota decides at most 4 limits; its BlockFor and MinInterval
// travel with the first rule and take no rule's place.
const MaxRules = 7

// Rule is one limit of a call (a quota.Limit: Max units per Expiration,
// Burst for the token bucket), with what the engine needs to decide it.
type Rule struct {
	// Algorithm is how the rule decides. Every rule of a call has the same.
	Algorithm Algorithm
	// Max is the units admitted per Expiration (the token bucket's refill
	// per Expiration). Must be > 0 and below 2^32 (the same for Burst), and for
	// SlidingLog at most MaxLogLimit (with the other rules'); see Step.
	Max int64
	// Burst is the token bucket's capacity; 0 means Max. Ignored by the
	// windows.
	Burst int64
	// Expiration is the window's length, at least 1 ms.
	Expiration time.Duration
	// Step is the time step the rule is decided in: a state keeps whole
	// steps, and an Expiration is a whole number of them (rounded up). 0 picks
	// the finest step, 1 ms or more, for which the arithmetic stays exact
	// (Max and Burst × Expiration in steps at most 2^51): 1 ms for all but
	// very large quotas, such as a billion per 30 days (1.152 s). A key
	// whose Max changes from call to call (a per-client limit) needs the
	// same Step on every call: the step of the largest Max it can have. A
	// state found in other steps (its time far ahead of now in these) reads
	// as no state.
	Step time.Duration
	// BlockFor, set on the first rule of a call, holds off a key that a
	// take is rejected for (one that could be admitted later) for this long
	// after the rejection, whatever its counts: its takes are rejected,
	// with Remaining 0 and RetryAfter the time until the take would be
	// admitted: the block's end, or later if the rules (or MinInterval)
	// would still reject it then; Never for a cost above the quota. The block's
	// end is kept in the key's value, after the rules' states, so every
	// call on a key must give the same BlockFor, adjustments too. 0, the
	// default, blocks nothing; other rules' BlockFor is not read.
	BlockFor time.Duration
	// MinInterval, set on the first rule of a call, is the least time
	// between two admitted takes of a key (of a cost above 0): one that
	// comes sooner is rejected, with Remaining 0 and RetryAfter the rest
	// of the wait, or longer if the rules have no room for it by then. Kept in the key's value as BlockFor is, so every call
	// on a key must give the same; 0, the default, is none.
	MinInterval time.Duration
}

// Result is one rule's part of a call's answer.
type Result struct {
	// Allowed reports whether the request was admitted and counted.
	Allowed bool
	// Limit is the quota decided against: Max, or Burst for the bucket
	// (quota.Decision.Limit, the X-RateLimit-Limit header).
	Limit int64
	// Remaining is how many requests of cost 1 would be admitted now.
	Remaining int64
	// ResetAfter is the time until the quota is fully back; for SlidingLog,
	// until the oldest counted unit leaves the window.
	ResetAfter time.Duration
	// RetryAfter is zero when allowed; when rejected, the time until the
	// same request would be admitted, or timestep.Never.
	RetryAfter time.Duration
	// CountedIn says where an admitted cost was counted; a refund gives it
	// back there.
	CountedIn int64
}

// Engine decides in Redis: each method is one script call (one round trip,
// or a share of a pipeline), atomic for every process that shares the
// keys. The states of all the rules of a key live in one Redis key, so the
// rules of a key must be the same, in the same order, on every call; all
// are of one Algorithm, 1 to MaxRules of them, and results is at least as
// long. Errors begin with "limiter: redis" and leave the key out.
type Engine interface {
	// Conn returns the go-redis client the engine calls through.
	Conn() goredis.UniversalClient

	// Take decides a request of cost units for key under rule, and counts
	// it if it is admitted.
	Take(ctx context.Context, key string, rule Rule, cost int64) (Result, error)

	// TakeAll decides a request of cost units for key under every rule at
	// once (say 10 per second and 1000 per hour): it is admitted when each
	// rule admits it, and then counted under each; a request that any rule
	// rejects is counted under none. results[i] gets rule i's part: Allowed
	// as the whole decision, its Limit, Remaining and ResetAfter, and
	// RetryAfter, the time until rule i would admit the request (0 when it
	// would now). The request can be admitted again after the longest
	// RetryAfter.
	TakeAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) (allowed bool, err error)

	// TakeUpToAll takes as much of cost as every rule has room for now,
	// and returns how much that was: a batch of jobs that takes what it
	// can, say. When no rule has room for one unit, it is a rejected take
	// of 1, whose RetryAfter says when one unit fits; when cost is 0, an
	// admitted take of 0. results are as TakeAll's.
	TakeUpToAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) (granted int64, err error)

	// TakeTurnAll is TakeAll for a request that may wait up to maxDelay
	// (rounded down to whole ms, at most 2^48-1 ms) for its turn: when
	// every rule admits it now, or at a time within maxDelay when they
	// all will, it is counted at once as a take at that time would be
	// counted, and wait is that time less the call's. A later call on the
	// key is decided at that time or after it. Its results are the state
	// at its turn. One whose turn lies beyond maxDelay is rejected and
	// counts nothing; its RetryAfter is the time until it would be
	// admitted without waiting. A turn is given back by RefundAll. No rule
	// may have BlockFor or MinInterval. Never batched with other calls.
	TakeTurnAll(ctx context.Context, key string, rules []Rule, cost int64, maxDelay time.Duration, results []Result) (allowed bool, wait time.Duration, err error)

	// TakeIdempotentAll is TakeAll whose first admission is kept for the
	// request's repeats (idempotency): record names where an admitted
	// call's answer is kept, for ttl (rounded up to whole ms, at most
	// 2^48-1 ms), and a call with the same record within ttl gets that
	// answer again, counts nothing and reports repeat, up to 8 repeats (the
	// next counts as a new call). A rejection is not kept: it counted
	// nothing, and its retry is decided afresh. The check, the take and the
	// record are one script call, so replicas that send the same request at
	// once count it once. The record is a key of its own in key's hash slot
	// (Cluster), sent to key's server (Ring): record as it is when it shares
	// key's hash tag, else record with the slot's hash tag added at its end
	// (or, when record holds a '{', in front). Give each request a record of
	// its own, under a name that no key you limit can take: a client that
	// chooses its key must not be able to choose a record's name. Never
	// batched with other calls.
	TakeIdempotentAll(ctx context.Context, key, record string, ttl time.Duration, rules []Rule, cost int64, results []Result) (allowed, repeat bool, err error)

	// ForgetRecord makes the record that TakeIdempotentAll keeps for key
	// under record answer no more repeats, so that a retry of that request
	// is decided, and counted, as a new one: for a take whose cost is
	// refunded, whose retries would otherwise repeat its admission for
	// free. A record that has already answered repeats stays, and
	// ForgetRecord reports repeated: those repeats were served on the take,
	// so its cost must not be refunded. Routed by key as the take is.
	ForgetRecord(ctx context.Context, key, record string) (repeated bool, err error)

	// RefundAll, an adjustment, credits cost units of a request that
	// TakeAll admitted back to key under every rule, each in the window its
	// result (from the take, CountedIn) names, if that window still counts,
	// and then sets results to the state the refund leaves, as a take of
	// cost 0 would see it.
	RefundAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) error

	// PenalizeAll, an adjustment, counts cost units against key under
	// every rule, whether or not they have room: a failed login that should
	// cost 5, say. Each rule counts at most its whole quota, so a key is
	// never held off for longer than the rule itself would hold it.
	// results are set as RefundAll sets them.
	PenalizeAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) error

	// RewardAll, an adjustment, gives cost units back to key under every
	// rule, from what it has spent now, whichever window counted them (a
	// solved captcha, say). results are set as RefundAll sets them.
	RewardAll(ctx context.Context, key string, rules []Rule, cost int64, results []Result) error

	// PeekAll reads key under every rule and counts nothing, writes
	// nothing: results[i] is rule i's state as a take of cost 0 sees it
	// (Remaining, ResetAfter), its RetryAfter the wait of a take of cost 1,
	// Allowed whether that take would be admitted now. held is how long the
	// key is held off whatever its counts: by BlockAll, by BlockFor, or by
	// MinInterval for a take of a cost. Never batched.
	PeekAll(ctx context.Context, key string, rules []Rule, results []Result) (held time.Duration, err error)

	// BlockAll holds key off for d (above 0, at most 365 days, rounded up
	// to whole ms) whatever its counts: every take of it is rejected, as
	// a BlockFor block rejects them, under any rules, until d has passed
	// (or a BlockFor block that ends later has), or Reset. A later
	// BlockAll replaces it. It keeps the counts, and answers as PeekAll.
	BlockAll(ctx context.Context, key string, rules []Rule, d time.Duration, results []Result) (held time.Duration, err error)

	// Reset deletes key's states under every rule, with its hold, block
	// and gap: its next take finds none.
	Reset(ctx context.Context, key string) error
}

// Hooks that storage/redis sets in its init, so that quota reaches the
// engine without storage/redis exporting it.
var (
	// Open returns an Engine over client, as storage/redis.New(client)
	// makes it (pipelined and batched), deciding at the server's TIME, or
	// at clock's time when clock is not nil (storage/redis.WithClock).
	Open func(client goredis.UniversalClient, clock func() time.Time) Engine

	// OfStore returns the Engine of storage when it is a
	// *storage/redis.Store, with the options it was made with; else nil.
	OfStore func(storage any) Engine
)

// Handed is a Storage that a middleware of this module hands to quota.
// For a middleware, a Storage on go-redis (with Conn) has always been
// decided by this engine, on the limiter's keys; quota decides one given
// to it directly the same way, but on keys of their own, since earlier
// releases of quota read and wrote those through Get and Set, in another
// layout (a rolling deploy would have each version read the other's
// values as nothing). Only this module can make a Handed.
type Handed struct {
	Storage interface {
		Get(key string) ([]byte, error)
		Set(key string, val []byte, exp time.Duration) error
		Delete(key string) error
	}
}

// Get, Set and Delete are the handed storage's.
func (h Handed) Get(key string) ([]byte, error) { return h.Storage.Get(key) }

// Set is the handed storage's.
func (h Handed) Set(key string, val []byte, exp time.Duration) error {
	return h.Storage.Set(key, val, exp)
}

// Delete is the handed storage's.
func (h Handed) Delete(key string) error { return h.Storage.Delete(key) }
