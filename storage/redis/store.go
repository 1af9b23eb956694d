// Package redis is the Redis store of github.com/fiberlimit/limiter: give
// a Store to a middleware's Config.Storage (or to quota.Config.Storage),
// and each decision is made by a script, with the state of a limited key
// in one Redis key, so that any number of processes sharing a Redis (or a
// Redis Cluster) admit exactly the limit together. Decisions made at the
// same time share pipelines, and the decisions a pipeline carries to one
// node are made by one call of a batch script (see WithoutPipelining and
// WithoutBatching). It works over any redis.UniversalClient of go-redis
// v9.
//
// Each algorithm is a Lua script (fixed_window.lua, sliding_window.lua,
// token_bucket.lua and sliding_log.lua, after its sliding_log_prelude.lua,
// each between head.lua and tail.lua) run with EVALSHA, falling back to
// EVAL when the server does not have it (after a restart or SCRIPT FLUSH).
// Time comes from the server's TIME unless WithClock is given, so processes
// with skewed clocks agree; time is kept in milliseconds. Every write sets a
// TTL of exactly the time the state still matters; nothing is stored
// without one. Redis 6 or later.
//
// A Store is a fiber.Storage too (Get, Set, Delete, Close), but for
// Reset, which would flush the whole database: see Store.Reset.
package redis

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is the limiter's state in Redis, decided by Lua scripts: give it
// to a middleware's Config.Storage or to quota.Config.Storage. It is safe
// for concurrent use.
type Store struct {
	client redis.UniversalClient // as given to New
	engine *engine               // the script calls, which the limiter makes
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the Store send its own time (whole milliseconds, not
// before 1970) with each call instead of letting Redis read its clock: for
// tests, and for deployments that trust their hosts' clocks more than the
// server's. Processes sharing keys must then have synchronized clocks.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.engine.clock = now }
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
	return func(s *Store) { s.engine.unpipelined = true }
}

// WithoutBatching keeps pipelining (see WithoutPipelining) but sends each
// call of a pipeline as a script call of its own, instead of one batch
// script call per algorithm and hash slot deciding many: Redis then spends
// a script dispatch and a TIME on every call, and a hook sees one EVALSHA
// per decision. Use it behind a proxy that
// routes a script call by its first key to one of several Redis servers
// (twemproxy, Envoy's Redis proxy) through a plain Client: a batch's other
// keys may belong to another server. A ClusterClient or Ring needs no such
// care: their batches hold one hash slot, or one shard.
func WithoutBatching() Option {
	return func(s *Store) { s.engine.unbatched = true }
}

// New returns a Store over client, which may be a plain, cluster, ring or
// failover client.
//
// Deadlines. Every script call (a decision) returns by its context's
// deadline. A ClusterClient or Ring does so only with
// ContextTimeoutEnabled set (otherwise a call waits up to its ReadTimeout,
// 3 s by default). A plain or failover Client made without it (as
// gofiber/storage/redis makes its client) is used for the script calls
// through a copy that Client.WithTimeout makes, sharing the client's
// connections, with ContextTimeoutEnabled set on the copy alone. go-redis
// does not carry a client's hooks over to such a copy: to have hooks
// (redisotel, say) see the Store's calls, make the client with
// ContextTimeoutEnabled, and it is used as it is. On the copy, a call that
// its deadline ends while go-redis retries a failed connection returns the
// error of that attempt (a reset connection, say) along with the
// context's.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client, engine: &engine{client: client}}
	for _, o := range opts {
		o(s)
	}
	s.engine.open()
	return s
}

// Conn returns the client given to New.
func (s *Store) Conn() redis.UniversalClient { return s.client }

// PipelineStats reports how many writes the Store's pipelines have sent to
// Redis (a call sent alone counting as a pipeline of one) and how many
// script calls they carried, since it was made: calls/pipelines is how many
// calls shared a write on average, 1 when there is no concurrency to
// coalesce. Not counted: the EVAL that follows a NOSCRIPT, writes that
// go-redis sends again, and calls that went again through a ClusterClient
// or Ring (see WithoutPipelining), which count once, in their first write.
// Both are 0 with WithoutPipelining.
func (s *Store) PipelineStats() (pipelines, calls int64) {
	return s.engine.pipelineStats()
}
