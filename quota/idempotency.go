package quota

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

// An idempotent take (Limiter.TakeIdempotent) counts a request's first
// take only: a client retrying the same request (a payment, an order, with the
// same Idempotency-Key) gets the first take's Result again, marked
// SourceRepeat, and spends nothing more. A retry of a larger cost than
// the first take's is no repeat: it is decided, and counted, as a new
// request. A first take that is given back (RefundIdempotent, for Skip*Requests)
// answers no repeats: its retries are decided afresh, so that a refund
// cannot be followed by free repeats; and one that has answered repeats
// already is not given back, since they were served on it.
//
// Only an admission decided by the backend is kept: a rejection counted
// nothing, so its retry is decided afresh (and admitted once there is
// room), and neither is a failure policy's answer kept. A request's record
// answers at most maxRepeats repeats: the next one counts as a new
// request, so that a client cannot reuse one id for unlimited free
// requests (the handler runs on every repeat; the limiter keeps decisions,
// not responses).
//
// On Redis the check, the take and the request's record are one script
// call (the Redis store's idempotent take), so that replicas receiving the retries at
// once count the request once. In memory and in another Storage the
// records are kept here, in this process, in a cache bounded by
// Config.IdempotencyKeys, each for Config.IdempotencyTTL: a request's
// takes wait for each other (the request is marked busy while its take is
// out), so two at once count once too, while takes of other requests go
// on meanwhile, a Storage's round trip included.
//
// On Redis the deny cache answers a request with a rejection the store
// gave that very request (key and id), never with one of its key's plain
// takes: a record may answer a request whose key is spent. A rejection
// says that no record answered the request and that there was no room for
// it; since a record comes only from an admission, the store answers the
// request alike until the key has room again, which its RetryAfter tells,
// unless a refund gives room back sooner. This replica's refunds drop the
// key's entries, as for plain takes; another replica's is not seen here,
// and there the request may then be admitted, while here its repeat would
// still be rejected: so such an entry lasts idempotentDenyMost at most. A client
// that retries a rejected request costs a script call a second a replica;
// one that sends random ids costs what random keys cost.

// DefaultIdempotencyTTL is how long a request's first Result is kept by
// default: an hour, which a client's retries of a request fall within. On
// Redis a request's record takes about 220 bytes for that long: 800 MB at
// 1,000 requests with an id a second; a day would take 19 GB.
const DefaultIdempotencyTTL = time.Hour

// DefaultIdempotencyKeys is how many requests' Results the in-memory and
// Storage backends keep by default: a record takes about 400 bytes, so
// about 3 MB a limiter.
const DefaultIdempotencyKeys = 1 << 13

// maxIdempotencyKeys bounds Config.IdempotencyKeys.
const maxIdempotencyKeys = 1 << 24

// maxRepeats is the most repeats a request's record answers; the Lua
// scripts hold the same bound.
const maxRepeats = 8

// idempotentDenyMost is how long (ms) the deny cache answers an idempotent
// take with the store's rejection of it, at most: the second within which
// the operators reach every replica's deny cache.
const idempotentDenyMost = 1000

// idempotencyShards is how many locks the records are spread over.
const idempotencyShards = 64

// requestID names a request of a key: a digest of both, so that records
// are of one size whatever the client sends.
type requestID [sha256.Size]byte

func requestIDOf(key, id string) requestID {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(key))) // no two (key, id) pairs read alike
	h.Write(n[:])
	h.Write([]byte(key))
	h.Write([]byte(id))
	var r requestID
	h.Sum(r[:0])
	return r
}

// record is how a request's record is named in Redis: the first 16 bytes
// of its digest, in hex.
func (r requestID) record() string { return hex.EncodeToString(r[:16]) }

// idempotencyCache keeps the first Result of requests, for ttl ms each and at
// most perShard a shard (the oldest go first).
type idempotencyCache struct {
	ttl      int64
	perShard int
	clock    func() int64
	shards   [idempotencyShards]idempotencyShard
}

type idempotencyShard struct {
	mu      sync.Mutex
	records map[requestID]idempotencyRecord
	order   []requestID // the records in the order they came, a ring once full
	next    int         // where the next record goes in order, once full
	// busy holds the requests whose take is out, each until it is done:
	// at most one entry per take under way. A take of a busy request
	// waits on idle, which is signalled whenever one of the shard's
	// takes is done.
	busy map[requestID]struct{}
	idle sync.Cond
}

type idempotencyRecord struct {
	v       Result
	cost    int64 // the admitted take's; a retry of a larger cost is no repeat
	until   int64 // ms
	repeats int   // answered so far
}

func newIdempotencyCache(ttl time.Duration, limit int, clock func() int64) *idempotencyCache {
	c := &idempotencyCache{ttl: max(1, ttl.Milliseconds()), perShard: max(1, (limit+idempotencyShards-1)/idempotencyShards), clock: clock}
	for i := range c.shards {
		s := &c.shards[i]
		s.records = make(map[requestID]idempotencyRecord)
		s.busy = make(map[requestID]struct{})
		s.idle.L = &s.mu
	}
	return c
}

// take returns the kept Result of request r, as a repeat, when its cost is
// at most the kept take's, or else the Result of take, which it keeps when
// it is an admission by the backend. Request r is busy meanwhile: another
// take of r waits for it, so that a request taken twice at once is taken
// once; takes of other requests do not wait, since take runs without the
// shard's lock.
func (c *idempotencyCache) take(r requestID, cost int64, take func() Result) Result {
	s := &c.shards[r[0]%idempotencyShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if _, ok := s.busy[r]; !ok {
			break
		}
		s.idle.Wait()
	}
	if rec, ok := s.records[r]; ok && rec.until > c.clock() && rec.repeats < maxRepeats && cost <= rec.cost {
		rec.repeats++
		s.records[r] = rec
		v := rec.v
		v.source = SourceRepeat
		return v
	}
	v := s.takeAlone(r, take)
	if !v.Allowed() || v.source != SourceBackend {
		return v
	}
	now := c.clock()
	if _, ok := s.records[r]; !ok {
		if len(s.order) < c.perShard {
			s.order = append(s.order, r)
		} else {
			delete(s.records, s.order[s.next])
			s.order[s.next] = r
			s.next = (s.next + 1) % len(s.order)
		}
	}
	s.records[r] = idempotencyRecord{v: v, cost: cost, until: now + c.ttl}
	return v
}

// takeAlone runs take with request r busy and the shard's lock released,
// which it holds again on return, when it wakes the takes waiting for r
// (even when take panics).
func (s *idempotencyShard) takeAlone(r requestID, take func() Result) Result {
	s.busy[r] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.busy, r)
		s.idle.Broadcast()
	}()
	return take()
}

// forget makes request r's record answer no more repeats, so that a retry
// is decided, and counted, afresh once its take is given back (a refund),
// and reports whether that take may be given back: not when the record has
// answered repeats already, which were served on it (the record then
// stays as it is).
func (c *idempotencyCache) forget(r requestID) (refundable bool) {
	s := &c.shards[r[0]%idempotencyShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[r]
	switch {
	case !ok:
		return true
	case rec.repeats > 0:
		return false
	}
	rec.repeats = maxRepeats
	s.records[r] = rec
	return true
}
