package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
)

// redisConn is what a middleware's Storage offers when it sits on go-redis
// v9: the *Storage of github.com/gofiber/storage/redis/v3 and this
// module's own redis.Store. Such a storage gets the atomic Lua store.
type redisConn interface {
	Conn() goredis.UniversalClient
}

// redisBackend decides in Redis, atomically for every process that shares
// the keys: one script call per decision and per refund, for all the
// limits of a key at once.
type redisBackend struct {
	store    *redis.Store
	alg      redis.Algorithm
	prefix   string // the limiter's identity, see keyPrefix
	probeKey string // see probeKeyOf
	onceTTL  time.Duration
	records  string // where the records of takes once per request live, see recordsOf
}

// probeKeyOf is the key a limiter's breaker probes with: KeyPrefix + Name
// + "{probe}", which no client key of any limiter reaches (a Name has no
// "{", and every state key has ":" after it).
func probeKeyOf(cfg *Config) string { return cfg.KeyPrefix + cfg.Name + "{probe}" }

// newRedisBackend returns the Redis backend of a limiter of alg whose keys
// begin with prefix, over store (this module's Store that a middleware was
// given) or else client; of cfg it uses the clock, KeyPrefix and Name.
func newRedisBackend(client goredis.UniversalClient, store *redis.Store, alg Algorithm, prefix string, cfg *Config) *redisBackend {
	clock := cfg.clock
	if store == nil || clock != nil {
		var opts []redis.Option
		if clock != nil {
			opts = append(opts, redis.WithClock(func() time.Time { return time.UnixMilli(clock()) }))
		}
		if store != nil {
			client = store.Conn()
		}
		store = redis.New(client, opts...)
	}
	algs := [...]redis.Algorithm{FixedWindow: redis.FixedWindow, SlidingWindow: redis.SlidingWindow, TokenBucket: redis.TokenBucket, SlidingLog: redis.SlidingLog}
	return &redisBackend{store: store, alg: algs[alg], prefix: prefix, probeKey: probeKeyOf(cfg), onceTTL: cfg.IdempotencyTTL,
		records: recordsOf(prefix)}
}

// honorsContext reports whether a redis.Store over client returns by a
// call's context deadline. It does over a plain or failover Client always
// (redis.New calls through a copy with ContextTimeoutEnabled); over a
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
	if b.alg == redis.SlidingLog {
		limit = redis.MaxLogLimit // the log's largest, which a probe a ms does not reach either
	}
	_, err := b.store.Take(ctx, b.probeKey, redis.Rule{Algorithm: b.alg, Limit: limit, Window: time.Millisecond}, 1)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || hasCause(err) {
		return err
	}
	c, ok := b.store.Conn().(*goredis.Client)
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
	id := storeIdentity(b.store)
	if id == "" {
		return checkEviction(ctx, b.store.Conn())
	}
	// What a look can read depends on the ACL user (INFO may be refused
	// to one and not another): each user looks for itself.
	switch c := b.store.Conn().(type) {
	case *goredis.Client:
		id += " user " + c.Options().Username
	case *goredis.ClusterClient:
		id += " user " + c.Options().Username
	case *goredis.Ring:
		id += " user " + c.Options().Username
	}
	v, _ := evictionLooks.LoadOrStore(id, new(atomic.Int64))
	looked := v.(*atomic.Int64)
	now, last := time.Now().UnixMilli(), looked.Load()
	if last != 0 && now-last < evictionCheckEvery || !looked.CompareAndSwap(last, now) {
		return evictionCheckEvery, nil // another limiter has looked, or is looking
	}
	next, warning = checkEviction(ctx, b.store.Conn())
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

// rules converts ls to the store's rules, with their steps.
func (b *redisBackend) rules(ls *limits, into *[maxLimits]redis.Rule) []redis.Rule {
	for i, r := range ls.r[:ls.n] {
		into[i] = redis.Rule{
			Algorithm: b.alg, Limit: r.limit, Burst: r.burst,
			Window: r.span(r.window), // the longest Duration for a window that long: it rounds to the same steps
			Step:   time.Duration(r.stepMillis()) * time.Millisecond,
		}
	}
	into[0].BlockFor = time.Duration(ls.block) * time.Millisecond
	into[0].MinInterval = time.Duration(ls.gap) * time.Millisecond
	return into[:ls.n]
}

func (b *redisBackend) take(ctx context.Context, key string, ls *limits, cost int64) (Result, error) {
	var rules [maxLimits]redis.Rule
	var results [maxLimits]redis.Result
	if ls.upTo {
		granted, err := b.store.TakeUpToAll(ctx, b.prefix+key, b.rules(ls, &rules), cost, results[:ls.n])
		if err != nil {
			return Result{}, err
		}
		v := verdictOf(&results, ls.n)
		v.granted = granted
		return v, nil
	}
	if _, err := b.store.TakeAll(ctx, b.prefix+key, b.rules(ls, &rules), cost, results[:ls.n]); err != nil {
		return Result{}, err
	}
	return verdictOf(&results, ls.n), nil
}

// onceRecords names the layout of the records of takes once per request
// (and the script's tag on their values, once_tag in head.lua): an older
// layout's records (under the limiter's prefix + "once:" or "once2:") are
// not read, so that replicas of two versions during a rolling deploy never
// read each other's records (a retry that goes to the other version is
// counted afresh).
const onceRecords = "once3:"

// recordsOf begins the names of the records of takes once per request of
// a limiter whose keys begin with prefix: prefix with its final ':' made a
// '!', then onceRecords. Not prefix itself: a key in Redis is the prefix
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
	return prefix[:len(prefix)-1] + "!" + onceRecords
}

// forgetOnce drops the record of a take once per request for key, unless
// it has answered repeats (see Store.ForgetOnce).
func (b *redisBackend) forgetOnce(ctx context.Context, key, record string) (repeated bool, err error) {
	return b.store.ForgetOnce(ctx, b.prefix+key, b.records+record)
}

// takeOnce takes cost for key once per request: record names the
// request's record, kept beside the key's state, under recordsOf.
func (b *redisBackend) takeOnce(ctx context.Context, key, record string, ls *limits, cost int64) (Result, error) {
	var rules [maxLimits]redis.Rule
	var results [maxLimits]redis.Result
	_, repeat, err := b.store.TakeOnceAll(ctx, b.prefix+key, b.records+record, b.onceTTL, b.rules(ls, &rules), cost, results[:ls.n])
	if err != nil {
		return Result{}, err
	}
	v := verdictOf(&results, ls.n)
	if repeat {
		v.source = SourceRepeat
	}
	return v, nil
}

func (b *redisBackend) refund(ctx context.Context, key string, ls *limits, cost int64, v *Result) (Result, error) {
	var rules [maxLimits]redis.Rule
	var results [maxLimits]redis.Result
	for i := range ls.n {
		results[i].CountedIn = v.each[i].countedIn
	}
	adjust := b.store.RefundAll
	switch v.adjust {
	case penalty:
		adjust = b.store.PenalizeAll
	case reward:
		adjust = b.store.RewardAll
	}
	if err := adjust(ctx, b.prefix+key, b.rules(ls, &rules), cost, results[:ls.n]); err != nil {
		return Result{}, err
	}
	return verdictOf(&results, ls.n), nil
}

// verdictOf converts the store's results for n limits.
func verdictOf(results *[maxLimits]redis.Result, n int) Result {
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
