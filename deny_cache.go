package limiter

import (
	"hash/maphash"
	"sync"
	"time"
)

// maxDenyCacheKeys bounds Config.DenyCacheKeys (about 800 MB).
const maxDenyCacheKeys = 1 << 24

// denyWays is the number of entries a key may take in its set.
const denyWays = 4

// denyCache remembers keys a store rejected, so that the same request is
// rejected locally until its RetryAfter has passed, without a call to the
// store. It is a set-associative table of fixed size, allocated once: a key
// hashes to one set of denyWays entries under one lock, and a new key takes
// an empty or ended entry, else the one that ends first. Keys are kept as
// two 64-bit hashes with per-cache random seeds, never as their bytes, so
// the cache holds nothing of the request and cannot be made to mix up two
// keys by a client, who does not know the seeds.
type denyCache struct {
	seed1, seed2 maphash.Seed
	sets         []denySet
	mask         uint64
}

type denySet struct {
	mu      sync.Mutex
	gen     uint64 // counts forgets, so a rejection older than a refund is not added
	entries [denyWays]denyEntry
}

// denyEntry is one rejected key: until is when its RetryAfter ends and
// reset when its quota is back (ms, the cache's clock); the rule it was
// rejected under, the cost and the remaining quota. until == 0 marks an
// empty entry.
type denyEntry struct {
	h1, h2       uint64
	until, reset int64
	limit, burst uint32
	cost         uint32
	remaining    uint32
}

// newDenyCache returns a cache of at least keys entries (rounded up to a
// power of two number of sets).
func newDenyCache(keys int) *denyCache {
	n := 1
	for n*denyWays < keys {
		n *= 2
	}
	return &denyCache{
		seed1: maphash.MakeSeed(),
		seed2: maphash.MakeSeed(),
		sets:  make([]denySet, n),
		mask:  uint64(n - 1),
	}
}

func (c *denyCache) hash(key string) (*denySet, uint64, uint64) {
	h1 := maphash.String(c.seed1, key)
	h2 := maphash.String(c.seed2, key)
	return &c.sets[h1&c.mask], h1, h2
}

// check returns the rejection of a request of cost under r for key at now
// (ms) when the cache holds one for the same rule and the same cost: the
// store would answer that request with the same rejection, but for the
// time that has passed. On a miss it returns the key's set's generation,
// for add.
func (c *denyCache) check(key string, now int64, r rule, cost int64) (Decision, bool, uint64) {
	set, h1, h2 := c.hash(key)
	set.mu.Lock()
	defer set.mu.Unlock()
	for i := range set.entries {
		e := &set.entries[i]
		if e.h1 != h1 || e.h2 != h2 || e.until == 0 {
			continue
		}
		if now >= e.until {
			*e = denyEntry{}
			break
		}
		if int64(e.limit) != r.limit || int64(e.burst) != r.burst || int64(e.cost) != cost {
			break
		}
		retry := e.until - now
		return Decision{
			Limit:      int(e.burst), // the capacity: burst equals limit but for the bucket
			Remaining:  int(e.remaining),
			ResetAfter: millis(max(e.reset-now, retry)),
			RetryAfter: millis(retry),
			source:     fromDenyCache,
		}, true, 0
	}
	return Decision{}, false, set.gen
}

// add records that the store rejected a request of cost for key at now
// with d, unless the key's set was told of a refund (forget) since check
// returned gen: the rejection may predate the credit. A rejection without
// a finite, positive RetryAfter is not kept.
func (c *denyCache) add(key string, now int64, r rule, cost int64, d Decision, gen uint64) {
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter == InfDuration || cost <= 0 || r.limit > maxLimit || r.burst > maxLimit {
		return
	}
	e := denyEntry{
		until:     now + ceilDiv(int64(d.RetryAfter), int64(time.Millisecond)),
		reset:     now + ceilDiv(int64(d.ResetAfter), int64(time.Millisecond)),
		limit:     uint32(r.limit),
		burst:     uint32(r.burst),
		cost:      uint32(min(cost, maxLimit)),
		remaining: uint32(min(max(d.Remaining, 0), maxLimit)),
	}
	if e.until == 0 {
		e.until = 1 // 0 marks an empty entry
	}
	set, h1, h2 := c.hash(key)
	e.h1, e.h2 = h1, h2
	set.mu.Lock()
	if set.gen != gen {
		set.mu.Unlock()
		return
	}
	slot := 0
	for i := range set.entries {
		o := &set.entries[i]
		if (o.h1 == h1 && o.h2 == h2) || o.until == 0 || o.until <= now {
			slot = i
			break
		}
		if o.until < set.entries[slot].until {
			slot = i
		}
	}
	set.entries[slot] = e
	set.mu.Unlock()
}

// forget drops key, whose count a refund has just lowered.
func (c *denyCache) forget(key string) {
	set, h1, h2 := c.hash(key)
	set.mu.Lock()
	set.gen++
	for i := range set.entries {
		if e := &set.entries[i]; e.h1 == h1 && e.h2 == h2 {
			*e = denyEntry{}
		}
	}
	set.mu.Unlock()
}
