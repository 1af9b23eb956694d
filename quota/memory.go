package quota

import (
	"context"
	"crypto/sha256"
	"hash/maphash"
	"sync/atomic"
	"time"
	"unsafe"
)

// The in-memory manager keeps every key's state in this process.
//
// Keys are spread over shards by hash, each with its own mutex, so requests
// for different keys rarely wait on each other. A shard is an open-addressing
// hash table of its own making rather than a Go map, for three reasons:
//   - memory: about 64 bytes per key besides the key's bytes, where a
//     map[string]struct and a copied string cost about twice that;
//   - the garbage collector: entries, index and key bytes hold no pointers,
//     so a million keys add nothing to what each GC cycle scans;
//   - shrinking: a Go map never gives memory back after its keys go.
//
// Under SlidingLog an entry also has its logs, a ring of Max entries per
// limit, in the shard's logs at the entry's index: fixed-size, so that a
// lookup finds them without a pointer, and moved with the entry when the
// shard is compacted. That costs 8 bytes per unit of Max per key whether
// the log is full or not, which is why the log's Max is at most 10,000
// and its keys are bounded by memory too (see logMemory).
//
// A limiter with several limits keeps the states of all of them in one
// entry: the first in the entry itself, the others in the shard's more,
// n-1 states per entry at the entry's index, so that one lookup decides
// under every limit and a limiter with one limit pays nothing for it.
//
// There is no background goroutine. Housekeeping rides on requests: every
// take looks at a couple of entries at the shard's sweep cursor, and every
// sweepEvery-th take in a shard also advances the cursor of another shard,
// in rotation, so traffic on any key reclaims expired keys everywhere. When
// a pass over a shard has seen at least half of its entries expired, or the
// shard must grow or is at its cap, it is compacted: expired entries are
// dropped, key bytes packed, and the index rebuilt at a size fitting what is
// left. A shard holds at most maxKeys/shardCount keys, so no such step costs
// more than a few hundred microseconds even at a million keys.
const (
	shardCount     = 256
	shardBits      = 8
	sweepPerTake   = 2  // entries looked at in a take's own shard
	sweepEvery     = 16 // takes per shard between sweeps of another shard
	sweepPerRotate = 64 // entries looked at in that other shard
	evictSample    = 8  // entries sampled for eviction at the cap
	capCompact     = 8  // at the cap, compact once per limit/capCompact inserts
	maxInlineKey   = 64 // longer keys are kept as a SHA-256 digest
	digestFlag     = 1 << 31
	minIndex       = 8
)

// manager is the in-memory backend: see above. It is also a Limiter's
// decider, in memory, and FailFallback's limiter.
type manager struct {
	alg      Algorithm
	windowed bool         // keys carry their window (see windowedKey); never for FailFallback's
	more     int          // states per entry besides its own: the limits' count - 1
	clock    func() int64 // tests only, in ms; nil: the request's time, see now
	origin   time.Time
	seed     maphash.Seed
	rotor    atomic.Uint32
	shards   [shardCount]shard
}

// newManager returns a manager deciding with alg under n limits (1 to
// maxLimits) for at most about maxKeys keys.
func newManager(alg Algorithm, n, maxKeys int, clock func() int64) *manager {
	m := &manager{alg: alg, more: n - 1, clock: clock, origin: time.Now(), seed: maphash.MakeSeed()}
	perShard := 1 // maxKeys / shardCount rounded up, without overflow
	if maxKeys > 0 {
		perShard = (maxKeys-1)/shardCount + 1
	}
	for i := range m.shards {
		m.shards[i].limit = perShard
		m.shards[i].stride = n - 1
		m.shards[i].rnd = uint64(i)*0x9E3779B97F4A7C15 | 1
	}
	return m
}

// useLogs makes m keep a ring of entries per limit of ls for every key:
// SlidingLog's, limit i's as long as its limit. Call it once, before the
// first take.
func (m *manager) useLogs(ls *limits) {
	var off [maxLimits + 1]int
	for i := range ls.n {
		off[i+1] = off[i] + int(ls.r[i].max)
	}
	for i := range m.shards {
		m.shards[i].logStride, m.shards[i].logOff = off[ls.n], off
	}
}

// entryKey is the form a key is kept in: itself, or for a key longer than
// maxInlineKey bytes its SHA-256 digest (written into buf), flagged so that
// it never equals a short key of the same bytes.
func entryKey(key string, buf *[sha256.Size]byte) (string, uint32) {
	if len(key) <= maxInlineKey {
		return key, uint32(len(key))
	}
	*buf = sha256.Sum256(unsafe.Slice(unsafe.StringData(key), len(key)))
	return unsafe.String(&buf[0], len(buf)), sha256.Size | digestFlag
}

// requestTimer is what a request context may tell of its own time:
// *fasthttp.RequestCtx.Time() is when the server began to handle it, read
// from the monotonic clock just before the handler ran.
type requestTimer interface{ Time() time.Time }

// now is the manager's time in ms since it was made, on the monotonic clock.
// A request's own start time serves when there is one, which spares a clock
// read (about 90 ns on some virtual machines) on every request. Requests
// handled at once on several connections may so reach a key slightly out of
// order; the step functions never let time go back for a key.
func (m *manager) now(ctx context.Context) int64 {
	if m.clock == nil {
		if rt, ok := ctx.(requestTimer); ok {
			if t := rt.Time(); !t.IsZero() {
				return int64(t.Sub(m.origin) / time.Millisecond)
			}
		}
	}
	return m.current()
}

// current is the manager's time now, read from the clock.
func (m *manager) current() int64 {
	if m.clock != nil {
		return m.clock()
	}
	return int64(time.Since(m.origin) / time.Millisecond)
}

func (m *manager) shardFor(key string) (*shard, uint64) {
	h := maphash.String(m.seed, key)
	return &m.shards[h>>(64-shardBits)], h
}

// takeKey is the decider's take, of cost for key under ls. The window a
// key carries is put together on the stack: a take in memory allocates
// nothing, and fails never.
func (m *manager) takeKey(ctx context.Context, key string, ls limits, cost int64) (Result, error) {
	var buf [keyRoom]byte
	if m.windowed {
		key = windowedKey(buf[:0], &ls, key)
	}
	var v Result
	m.takeInto(ctx, key, &ls, cost, &v)
	return v, nil
}

// adjustKey is the decider's adjustment of cost units for key under ls
// (see adjust); it never fails.
func (m *manager) adjustKey(ctx context.Context, key string, ls limits, cost int64, v Result) (Result, error) {
	var buf [keyRoom]byte
	if m.windowed {
		key = windowedKey(buf[:0], &ls, key)
	}
	after, _ := m.adjust(ctx, key, &ls, cost, &v)
	return after, nil
}

func (m *manager) take(ctx context.Context, key string, ls *limits, cost int64) (Result, error) {
	var v Result
	m.takeInto(ctx, key, ls, cost, &v)
	return v, nil
}

// takeInto is take writing its Result into v, which must be zero.
func (m *manager) takeInto(ctx context.Context, key string, ls *limits, cost int64, v *Result) {
	var buf [sha256.Size]byte
	k, klen := entryKey(key, &buf)
	s, h := m.shardFor(k)
	now := m.now(ctx)
	s.mu.Lock()
	i := s.find(k, klen, uint32(h))
	var sts [maxStates]state
	var lg *logs
	if i >= 0 && s.entries[i].exp > now {
		s.load(i, &sts)
		if s.logStride > 0 {
			lg = s.rings(i, ls, new(logs))
		}
	}
	blocked := false // the key's block changed
	hold := s.holds.end(k, now)
	switch {
	case ls.keyRules() || hold != 0:
		blocked = m.alg.decideKeyInto(v, &sts, lg, now, ls, cost, hold)
		if ls.upTo {
			cost = v.granted
		}
	case ls.upTo:
		m.alg.decideUpToInto(v, &sts, lg, now, ls, cost)
		cost = v.granted
	case ls.turn:
		m.alg.decideTurnInto(v, &sts, lg, now, ls, cost)
	case ls.n == 1 && m.alg != SlidingLog:
		m.alg.decideOne(v, &sts[0], now, &ls.r[0], cost)
	default:
		m.alg.decideInto(v, &sts, lg, now, ls, cost)
	}
	if v.Allowed() && cost > 0 || blocked {
		// A key is only tracked once it has state worth keeping, so requests
		// that count nothing never take a slot; nor do they write (the Lua
		// twins write nothing for them either).
		if exp := m.alg.expiryAll(&sts, ls); i >= 0 || exp > now {
			if i < 0 {
				i = s.insert(k, klen, uint32(h), now)
			}
			s.store(i, &sts, exp)
			if s.logStride > 0 && v.Allowed() && cost > 0 {
				s.rings(i, ls, new(logs)).record(&sts, ls, cost)
			}
		}
	}
	s.sweep(now, sweepPerTake)
	s.takes++
	rotate := s.takes%sweepEvery == 0
	s.mu.Unlock()
	if rotate {
		m.sweepAnother(now)
	}
}

// adjust applies the adjustment v.adjust of cost units to key: the
// refund of the take that returned v, or a penalty or a reward.
func (m *manager) adjust(_ context.Context, key string, ls *limits, cost int64, v *Result) (Result, error) {
	var buf [sha256.Size]byte
	k, klen := entryKey(key, &buf)
	s, h := m.shardFor(k)
	now := m.current() // when the request ends, not when it began
	s.mu.Lock()
	var sts [maxStates]state
	i := s.find(k, klen, uint32(h))
	kept := int64(0) // when the key's entry ends: an adjustment keeps it at least that long
	if i >= 0 && s.entries[i].exp > now {
		s.load(i, &sts)
		kept = s.entries[i].exp
	}
	var lg *logs
	if s.logStride > 0 {
		if i < 0 && v.adjust == penalty && cost > 0 {
			// A penalty on a key that has none: its entries need a ring.
			i = s.insert(k, klen, uint32(h), now)
		}
		if i >= 0 {
			lg = s.rings(i, ls, new(logs))
		}
	}
	after := m.alg.adjustAll(&sts, lg, now, ls, cost, v)
	exp := m.alg.keep(&sts, ls, m.alg.expiryAll(&sts, ls), kept)
	if i < 0 && v.adjust == penalty && exp > now {
		i = s.insert(k, klen, uint32(h), now) // a penalty on a key that has none
	}
	if i >= 0 {
		s.store(i, &sts, exp)
	}
	s.mu.Unlock()
	return after, nil
}

// sweepAnother advances the sweep of the next shard in rotation, if nobody
// holds it: reclaiming memory never makes a request wait.
func (m *manager) sweepAnother(now int64) {
	s := &m.shards[m.rotor.Add(1)%shardCount]
	if s.mu.TryLock() {
		s.sweep(now, sweepPerRotate)
		s.mu.Unlock()
	}
}

// len reports how many entries the manager holds, expired or not.
func (m *manager) len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}
