package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
)

// redisConn is what a Storage offers when it sits on go-redis v9: the
// *Storage of github.com/gofiber/storage/redis/v3 and this module's
// storage/redis Store. Such a storage is decided by the Lua engine, on its
// client (see onRedis).
type redisConn interface {
	Conn() goredis.UniversalClient
}

// onRedis reports whether st is a Storage on go-redis, which the Lua
// engine decides in, atomically, instead of reading and writing it.
func onRedis(st Storage) bool {
	_, ok := st.(redisConn)
	return ok
}

// checkConn returns an error, naming field, when the Redis that client
// or storage (a RedisStore, or a Storage on go-redis) would decide in is
// no client: a nil Store, one made without redis.New, a Conn that returns
// nil. (Importing storage/redis also sets redisengine's hooks.)
func checkConn(client goredis.UniversalClient, storage Storage, field string) error {
	if client != nil {
		return nil
	}
	c, ok := storage.(redisConn)
	if !ok {
		return nil
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("limiter: %s is a nil %T; make it with its package's New", field, c)
	}
	if c.Conn() == nil {
		if _, isStore := c.(*redis.Store); isStore {
			return fmt.Errorf("limiter: %s is a storage/redis Store with no client; make it with redis.New", field)
		}
		return fmt.Errorf("limiter: %s is a %T whose Conn() is nil; make it with its New, on a go-redis client", field, c)
	}
	return nil
}

// redisBackend decides in Redis, atomically for every process that shares
// the keys: one script call per decision and per refund, for all the
// limits of a key at once.
type redisBackend struct {
	engine    redisengine.Engine
	alg       redisengine.Algorithm
	prefix    string // the limiter's identity, see keyPrefix
	probeKey  string // see probeKeyOf
	recordTTL time.Duration
	records   string // where the records of idempotent takes live, see recordsOf
}

// probeKeyOf is the key a limiter's breaker probes with: KeyPrefix + Name
// + "{probe}", which no client key of any limiter reaches (a Name has no
// "{", and every state key has ":" after it).
func probeKeyOf(cfg *Config) string { return cfg.KeyPrefix + cfg.Name + "{probe}" }

// newRedisBackend returns the Redis backend of a limiter of alg whose keys
// begin with prefix: the Lua engine over client, or when client is nil
// over storage, a Storage on go-redis (see onRedis): a storage/redis
// Store's own engine, with its options, else an engine over its Conn().
// With a clock in cfg (Config.Now), the engine decides at that clock's
// time over the client alone. Of cfg it uses the clock, KeyPrefix and
// Name.
func newRedisBackend(client goredis.UniversalClient, storage Storage, alg Algorithm, prefix string, cfg *Config) *redisBackend {
	clock := cfg.clock
	var engine redisengine.Engine
	if client == nil {
		if clock == nil {
			engine = redisengine.OfStore(storage)
		}
		client = storage.(redisConn).Conn()
	}
	if engine == nil {
		var now func() time.Time
		if clock != nil {
			now = func() time.Time { return time.UnixMilli(clock()) }
		}
		engine = redisengine.Open(client, now)
	}
	algs := [...]redisengine.Algorithm{FixedWindow: redisengine.FixedWindow, SlidingWindow: redisengine.SlidingWindow, TokenBucket: redisengine.TokenBucket, SlidingLog: redisengine.SlidingLog}
	return &redisBackend{engine: engine, alg: algs[alg], prefix: prefix, probeKey: probeKeyOf(cfg), recordTTL: cfg.IdempotencyTTL,
		records: recordsOf(prefix)}
}

// honorsContext reports whether the Lua engine over client returns by a
// call's context deadline. It does over a plain or failover Client always
// (the engine calls through a copy with ContextTimeoutEnabled); over a
// ClusterClient or Ring only when it was made with ContextTimeoutEnabled,
// and otherwise waits for the client's ReadTimeout (3 s by default)
// whatever the context says.
//
// A negative ReadTimeout or WriteTimeout makes go-redis set no deadline on
// the connection at all, not even the context's: such a client made with
// ContextTimeoutEnabled does not return by the deadline either.
func honorsContext(client goredis.UniversalClient) bool {
	switch c := client.(type) {
	case *goredis.Client:
		o := c.Options()
		return !o.ContextTimeoutEnabled || o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case *goredis.ClusterClient:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case *goredis.Ring:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	}
	return false
}

// probe makes the call a decision makes, with a write: the script of the
// limiter's algorithm takes 1 from a limit no probe reaches on the probe
// key, and keeps it for a ms or two. A server that is out of memory,
// holds writes (CLIENT PAUSE WRITE) or refuses the credentials fails it,
// where it would answer a PING.
//
// A probe that its deadline ends (no other cause known) tells whether
// Redis takes connections at all, with a dial of its own: an outage's
// reports after the first then say whether the server is gone (connection
// refused) or there but not answering.
func (b *redisBackend) probe(ctx context.Context) error {
	limit := int64(math.MaxUint32)
	if b.alg == redisengine.SlidingLog {
		limit = MaxLogLimit // the log's largest, which a probe a ms does not reach either
	}
	_, err := b.engine.Take(ctx, b.probeKey, redisengine.Rule{Algorithm: b.alg, Max: limit, Expiration: time.Millisecond}, 1)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || hasCause(err) {
		return err
	}
	c, ok := b.engine.Conn().(*goredis.Client)
	if !ok {
		return err
	}
	opts := c.Options()
	server := opts.Addr
	if server == "FailoverClient" { // go-redis's name for a Sentinel failover client
		server = "the master that Sentinel names"
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dialCheckTimeout)
	defer cancel()
	conn, dialErr := opts.Dialer(ctx, opts.Network, opts.Addr)
	if dialErr != nil {
		return fmt.Errorf("limiter: redis: cannot connect to %s (%w); the probe: %w", server, dialErr, err)
	}
	_ = conn.Close()
	return fmt.Errorf("%w (%s takes connections, but did not answer in time)", err, server)
}

// dialCheckTimeout bounds the dial of a probe that tells whether Redis
// takes connections.
const dialCheckTimeout = 500 * time.Millisecond

// hasCause tells whether err names what failed beyond a deadline: an error
// reply, or a network error other than a timeout.
func hasCause(err error) bool {
	var reply goredis.Error
	var netErr net.Error
	return errors.As(err, &reply) || errors.As(err, &netErr) && !netErr.Timeout()
}

// checkEviction looks at whether the Redis servers may evict the
// limiter's keys (see checkEviction), unless another limiter of this
// process on the same Redis has looked within evictionCheckEvery: the
// limiters sharing a Redis look, and warn, once between them.
func (b *redisBackend) checkEviction(ctx context.Context) (next int64, warning error) {
	id := storeIdentity(b.engine.Conn())
	if id == "" {
		return checkEviction(ctx, b.engine.Conn())
	}
	// What a look can read depends on the ACL user (INFO may be refused
	// to one and not another): each user looks for itself.
	user, _ := credentials(b.engine.Conn())
	id += " user " + user
	v, _ := evictionLooks.LoadOrStore(id, new(atomic.Int64))
	looked := v.(*atomic.Int64)
	now, last := time.Now().UnixMilli(), looked.Load()
	if last != 0 && now-last < evictionCheckEvery || !looked.CompareAndSwap(last, now) {
		return evictionCheckEvery, nil // another limiter has looked, or is looking
	}
	next, warning = checkEviction(ctx, b.engine.Conn())
	switch {
	case next == evictionRetry:
		looked.CompareAndSwap(now, last) // it could not look: the next limiter to ask may
	case next < 0:
		looked.Store(math.MaxInt64) // it never can: nor can the others
	}
	return next, warning
}

// evictionLooks holds, by storeIdentity and ACL user, when (Unix ms) a limiter of this
// process last looked at that Redis's eviction settings.
var evictionLooks sync.Map

// The engine decides a key's limits in one call, which takes at most
// redisengine.MaxRules rules.
var _ [redisengine.MaxRules - maxLimits]struct{}

// rules converts ls to the engine's rules, with their steps.
func (b *redisBackend) rules(ls *limits, into *[maxLimits]redisengine.Rule) []redisengine.Rule {
	for i, r := range ls.r[:ls.n] {
		into[i] = redisengine.Rule{
			Algorithm: b.alg, Max: r.max, Burst: r.burst,
			Expiration: r.span(r.window), // the longest Duration for a window that long: it rounds to the same steps
			Step:       time.Duration(r.stepMillis()) * time.Millisecond,
		}
	}
	into[0].BlockFor = time.Duration(ls.block) * time.Millisecond
	into[0].MinInterval = time.Duration(ls.gap) * time.Millisecond
	return into[:ls.n]
}

func (b *redisBackend) take(ctx context.Context, key string, ls *limits, cost int64) (Result, error) {
	var rules [maxLimits]redisengine.Rule
	var results [maxLimits]redisengine.Result
	if ls.upTo {
		granted, err := b.engine.TakeUpToAll(ctx, b.prefix+key, b.rules(ls, &rules), cost, results[:ls.n])
		if err != nil {
			return Result{}, err
		}
		v := resultOf(&results, ls.n)
		v.granted = granted
		return v, nil
	}
	if ls.turn {
		_, wait, err := b.engine.TakeTurnAll(ctx, b.prefix+key, b.rules(ls, &rules), cost, time.Duration(ls.delay)*time.Millisecond, results[:ls.n])
		if err != nil {
			return Result{}, err
		}
		v := resultOf(&results, ls.n)
		v.wait = wait.Milliseconds()
		return v, nil
	}
	if _, err := b.engine.TakeAll(ctx, b.prefix+key, b.rules(ls, &rules), cost, results[:ls.n]); err != nil {
		return Result{}, err
	}
	return resultOf(&results, ls.n), nil
}

// recordsLayout names the layout of the records of idempotent takes
// (and the script's tag on their values, once_tag in head.lua): an older
// layout's records (under the limiter's prefix + "once:" or "once2:") are
// not read, so that replicas of two versions during a rolling deploy never
// read each other's records (a retry that goes to the other version is
// counted afresh).
const recordsLayout = "once3:"

// recordsOf begins the names of the records of idempotent takes of
// a limiter whose keys begin with prefix: prefix with its final ':' made a
// '!', then recordsLayout. Not prefix itself: a key in Redis is the prefix
// and the client's key as it is, so a client that chooses its key could
// name a record and plant its own state there, as a forged record. No key
// of this limiter has a '!' where its prefix ends with ':'; nor of another
// limiter after the same KeyPrefix, whose prefix would have to begin a
// records name: Name, the algorithm tag and the windows hold no ':' (New
// refuses a Name with one; see keyPrefix), so that prefix would be this
// one up to the windows, followed by windows holding a '!', and windows
// are digits, "h", "m", "s", "ms", '+', '~' and '@' (keyPrefix,
// timestep.AppendWindow), never a '!'.
func recordsOf(prefix string) string {
	return prefix[:len(prefix)-1] + "!" + recordsLayout
}

// forgetIdempotent drops the record of an idempotent take for key, unless
// it has answered repeats (see redisengine.Engine.ForgetRecord).
func (b *redisBackend) forgetIdempotent(ctx context.Context, key, record string) (repeated bool, err error) {
	return b.engine.ForgetRecord(ctx, b.prefix+key, b.records+record)
}

// takeIdempotent takes cost for key once per request: record names the
// request's record, kept beside the key's state, under recordsOf.
func (b *redisBackend) takeIdempotent(ctx context.Context, key, record string, ls *limits, cost int64) (Result, error) {
	var rules [maxLimits]redisengine.Rule
	var results [maxLimits]redisengine.Result
	_, repeat, err := b.engine.TakeIdempotentAll(ctx, b.prefix+key, b.records+record, b.recordTTL, b.rules(ls, &rules), cost, results[:ls.n])
	if err != nil {
		return Result{}, err
	}
	v := resultOf(&results, ls.n)
	if repeat {
		v.source = SourceRepeat
	}
	return v, nil
}

func (b *redisBackend) adjust(ctx context.Context, key string, ls *limits, cost int64, v *Result) (Result, error) {
	var rules [maxLimits]redisengine.Rule
	var results [maxLimits]redisengine.Result
	for i := range ls.n {
		results[i].CountedIn = v.each[i].countedIn
	}
	adjust := b.engine.RefundAll
	switch v.adjust {
	case penalty:
		adjust = b.engine.PenalizeAll
	case reward:
		adjust = b.engine.RewardAll
	}
	if err := adjust(ctx, b.prefix+key, b.rules(ls, &rules), cost, results[:ls.n]); err != nil {
		return Result{}, err
	}
	return resultOf(&results, ls.n), nil
}

// resultOf converts the engine's results for n limits.
func resultOf(results *[maxLimits]redisengine.Result, n int) Result {
	v := Result{n: n}
	for i, res := range results[:n] {
		v.each[i] = Decision{
			Allowed:    res.Allowed,
			Limit:      int(res.Limit),
			Remaining:  int(res.Remaining),
			ResetAfter: res.ResetAfter,
			RetryAfter: res.RetryAfter,
			countedIn:  res.CountedIn,
		}

	}
	return v
}

// peek reads key as a take of 1 would find it, counting nothing (see
// Limiter.Peek): the Result and how long (ms) the key is held off.
func (b *redisBackend) peek(ctx context.Context, key string, ls *limits) (Result, int64, error) {
	var rules [maxLimits]redisengine.Rule
	var results [maxLimits]redisengine.Result
	held, err := b.engine.PeekAll(ctx, b.prefix+key, b.rules(ls, &rules), results[:ls.n])
	if err != nil {
		return Result{}, 0, err
	}
	return resultOf(&results, ls.n), held.Milliseconds(), nil
}

// block holds key off for d ms (see Limiter.Block), and then reads it as
// peek does.
func (b *redisBackend) block(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error) {
	var rules [maxLimits]redisengine.Rule
	var results [maxLimits]redisengine.Result
	held, err := b.engine.BlockAll(ctx, b.prefix+key, b.rules(ls, &rules), time.Duration(d)*time.Millisecond, results[:ls.n])
	if err != nil {
		return Result{}, 0, err
	}
	return resultOf(&results, ls.n), held.Milliseconds(), nil
}

// reset deletes key's state (see Limiter.Reset).
func (b *redisBackend) reset(ctx context.Context, key string) error {
	return b.engine.Reset(ctx, b.prefix+key)
}
