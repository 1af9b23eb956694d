package quota

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
// rejected locally until its RetryAfter has passed (most ms at most),
// without a call to the store. It is a set-associative table of fixed size, allocated once: a key
// hashes to one set of denyWays entries under one lock, and a new key takes
// an empty or ended entry, else the one that ends first. Keys are kept as
// two 64-bit hashes with per-cache random seeds, never as their bytes, so
// the cache holds nothing of the request and cannot be made to mix up two
// keys by a client, who does not know the seeds. A limiter with several
// limits keeps each limit's part of a rejection: the first in the entry,
// the others in more, n-1 per entry.
type denyCache struct {
	seed1, seed2 maphash.Seed
	sets         []denySet
	more         []denyPart // limits 1 to n-1 of every entry
	stride       int        // n-1
	mask         uint64
	// most is how long (ms) a rejection is kept at most: operatorReach,
	// so that an operator's Reset reaches every replica within it, or
	// Config.Lease when shorter.
	most int64
}

type denySet struct {
	mu      sync.Mutex
	gen     uint64 // counts forgets, so a rejection older than a refund is not added
	entries [denyWays]denyEntry
}

// denyEntry is one rejected key: until is when every limit admits the
// request again (ms, the cache's clock), limit and burst the first limit's
// rule when it was rejected (MaxFunc may change it), cost the request's
// cost, and part the first limit's part. until == 0 marks an empty entry.
type denyEntry struct {
	h1, h2       uint64
	until        int64
	limit, burst uint32
	cost         uint32
	part         denyPart
}

// denyPart is one limit's part of a rejection: when it would admit the
// request (until), when its quota is back (reset), both ms, and what it
// had left.
type denyPart struct {
	until, reset int64
	remaining    uint32
}

// newDenyCache returns a cache of at least keys entries (rounded up to a
// power of two number of sets) for a limiter of n limits.
func newDenyCache(keys, n int) *denyCache {
	sets := 1
	for sets*denyWays < keys {
		sets *= 2
	}
	return &denyCache{
		seed1:  maphash.MakeSeed(),
		seed2:  maphash.MakeSeed(),
		sets:   make([]denySet, sets),
		more:   make([]denyPart, sets*denyWays*(n-1)),
		stride: n - 1,
		mask:   uint64(sets - 1),
		most:   operatorReach,
	}
}

func (c *denyCache) hash(key string) (*denySet, []denyPart, uint64, uint64) {
	h1 := maphash.String(c.seed1, key)
	h2 := maphash.String(c.seed2, key)
	i := h1 & c.mask
	return &c.sets[i], c.more[int(i)*denyWays*c.stride : int(i+1)*denyWays*c.stride], h1, h2
}

// check returns the rejection of a request of cost under ls for key at now
// (ms) when the cache holds one for the same rules and the same cost: the
// store would answer that request with the same rejection, but for the
// time that has passed. On a miss it returns the key's set's generation,
// for add.
func (c *denyCache) check(key string, now int64, ls *limits, cost int64) (Result, bool, uint64) {
	set, more, h1, h2 := c.hash(key)
	return c.lookup(set, more, h1, h2, now, ls, cost)
}

// checkIdempotent is check for request r of key, an idempotent take
// (Limiter.TakeIdempotent on Redis): it answers only with a rejection the
// store gave that request (addIdempotent), never with one of key's plain takes, since
// r may have a record that answers its repeat though key is spent. Its
// entries are in key's set, under key's first hash (forget drops them
// with key's own) and a second hash of r.
func (c *denyCache) checkIdempotent(key string, r *requestID, now int64, ls *limits, cost int64) (Result, bool, uint64) {
	set, more, h1, _ := c.hash(key)
	return c.lookup(set, more, h1, maphash.Bytes(c.seed2, r[:]), now, ls, cost)
}

// lookup is check in set for the entry of hashes h1 and h2.
func (c *denyCache) lookup(set *denySet, more []denyPart, h1, h2 uint64, now int64, ls *limits, cost int64) (Result, bool, uint64) {
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
		if int64(e.limit) != ls.r[0].max || int64(e.burst) != ls.r[0].burst || int64(e.cost) != cost {
			break
		}
		v := Result{n: ls.n, source: SourceDenyCache}
		v.each[0] = e.part.decision(now, ls.r[0], cost)
		for j := 1; j < ls.n; j++ {
			v.each[j] = more[i*c.stride+j-1].decision(now, ls.r[j], cost)
		}
		return v, true, 0
	}
	return Result{}, false, set.gen
}

// decision is the part of a limit of rule r at now, for a request of cost.
// A limit that would admit the request by now (another limit of the entry
// still rejects it) has at least cost left.
func (p *denyPart) decision(now int64, r rule, cost int64) Decision {
	retry := max(0, p.until-now)
	remaining := int64(p.remaining)
	if retry == 0 {
		remaining = max(remaining, cost)
	}
	return Decision{
		Limit:      int(r.burst), // the capacity: burst equals limit but for the bucket
		Remaining:  int(remaining),
		ResetAfter: millis(max(p.reset-now, retry)),
		RetryAfter: millis(retry),
	}
}

// add records that the store rejected a request of cost for key at now
// with v, unless the key's set was told of a refund (forget) since check
// returned gen: the rejection may predate the credit. A rejection without
// a finite, positive RetryAfter is not kept.
func (c *denyCache) add(key string, now int64, ls *limits, cost int64, v *Result, gen uint64) {
	set, more, h1, h2 := c.hash(key)
	c.put(set, more, h1, h2, c.most, now, ls, cost, v, gen)
}

// addIdempotent is add for request r of key, an idempotent take that the
// store rejected (see checkIdempotent), for at most most ms.
func (c *denyCache) addIdempotent(key string, r *requestID, most, now int64, ls *limits, cost int64, v *Result, gen uint64) {
	set, more, h1, _ := c.hash(key)
	c.put(set, more, h1, maphash.Bytes(c.seed2, r[:]), min(most, c.most), now, ls, cost, v, gen)
}

// put is add into set, as the entry of hashes h1 and h2, kept for at most
// most ms.
func (c *denyCache) put(set *denySet, more []denyPart, h1, h2 uint64, most, now int64, ls *limits, cost int64, v *Result, gen uint64) {
	retry := v.RetryAfter()
	if v.Allowed() || retry <= 0 || retry == Never || cost <= 0 || ls.r[0].max > maxLimit || ls.r[0].burst > maxLimit {
		return
	}
	e := denyEntry{
		until: now + min(ceilDiv(int64(retry), int64(time.Millisecond)), most),
		limit: uint32(ls.r[0].max),
		burst: uint32(ls.r[0].burst),
		cost:  uint32(min(cost, maxLimit)),
		part:  newDenyPart(now, &v.each[0]),
	}
	if e.until == 0 {
		e.until = 1 // 0 marks an empty entry
	}
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
	for j := 1; j < ls.n; j++ {
		more[slot*c.stride+j-1] = newDenyPart(now, &v.each[j])
	}
	set.mu.Unlock()
}

// newDenyPart keeps d, a limit's part of a rejection at now.
func newDenyPart(now int64, d *Decision) denyPart {
	return denyPart{
		until:     now + ceilDiv(int64(d.RetryAfter), int64(time.Millisecond)),
		reset:     now + ceilDiv(int64(d.ResetAfter), int64(time.Millisecond)),
		remaining: uint32(min(max(d.Remaining, 0), maxLimit)),
	}
}

// forget drops key, whose count a refund has just lowered, with the
// rejections of its idempotent takes (addIdempotent): every entry of key's
// first hash.
func (c *denyCache) forget(key string) {
	set, _, h1, _ := c.hash(key)
	set.mu.Lock()
	set.gen++
	for i := range set.entries {
		if e := &set.entries[i]; e.h1 == h1 {
			*e = denyEntry{}
		}
	}
	set.mu.Unlock()
}
