package quota

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// A take once per request (Limiter.TakeOnce) counts a request's first take
// only: a client retrying the same request (a payment, an order, with the
// same Idempotency-Key) gets the first take's Result again, marked
// SourceRepeat, and spends nothing more.
//
// On Redis the check, the take and the request's record are one script
// call (redis.Store.TakeOnceAll), so that replicas receiving the retries at
// once count the request once. In memory and in another Storage the
// records are kept here, in this process, in a cache bounded by
// Config.IdempotencyKeys, each for Config.IdempotencyTTL: a request's
// takes wait for each other on its shard's lock, so two at once count
// once too.

// DefaultIdempotencyTTL is how long a request's first Result is kept by
// default: an hour, which a client's retries of a request fall within. On
// Redis a request's record takes about 220 bytes for that long: 800 MB at
// 1,000 requests with an id a second; a day would take 19 GB.
const DefaultIdempotencyTTL = time.Hour

// DefaultIdempotencyKeys is how many requests' Results the in-memory and
// Storage backends keep by default.
const DefaultIdempotencyKeys = 1 << 16

// maxIdempotencyKeys bounds Config.IdempotencyKeys.
const maxIdempotencyKeys = 1 << 24

// onceShards is how many locks the records are spread over.
const onceShards = 64

// requestID names a request of a key: a digest of both, so that records
// are of one size whatever the client sends.
type requestID [sha256.Size]byte

func requestIDOf(key, id string) requestID {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(id))
	var r requestID
	h.Sum(r[:0])
	return r
}

// record is how a request's record is named in Redis: the first 16 bytes
// of its digest, in hex.
func (r requestID) record() string { return hex.EncodeToString(r[:16]) }

// onceCache keeps the first Result of requests, for ttl ms each and at
// most perShard a shard (the oldest go first).
type onceCache struct {
	ttl      int64
	perShard int
	clock    func() int64
	shards   [onceShards]onceShard
}

type onceShard struct {
	mu      sync.Mutex
	records map[requestID]onceRecord
	order   []requestID // the records in the order they came, a ring once full
	next    int         // where the next record goes in order, once full
}

type onceRecord struct {
	v     Result
	until int64 // ms
}

func newOnceCache(ttl time.Duration, limit int, clock func() int64) *onceCache {
	c := &onceCache{ttl: max(1, ttl.Milliseconds()), perShard: max(1, (limit+onceShards-1)/onceShards), clock: clock}
	for i := range c.shards {
		c.shards[i].records = make(map[requestID]onceRecord)
	}
	return c
}

// take returns the kept Result of request r, as a repeat, or else the
// Result of take, which it keeps. The shard's lock is held meanwhile, so
// that a request taken twice at once is taken once.
func (c *onceCache) take(r requestID, take func() Result) Result {
	s := &c.shards[r[0]%onceShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := c.clock()
	if rec, ok := s.records[r]; ok && rec.until > now {
		v := rec.v
		v.source = SourceRepeat
		return v
	}
	v := take()
	if _, ok := s.records[r]; !ok {
		if len(s.order) < c.perShard {
			s.order = append(s.order, r)
		} else {
			delete(s.records, s.order[s.next])
			s.order[s.next] = r
			s.next = (s.next + 1) % len(s.order)
		}
	}
	s.records[r] = onceRecord{v: v, until: now + c.ttl}
	return v
}
