package quota

import (
	"context"
	"crypto/sha256"
	"hash/maphash"
	"math/bits"
	"sync"
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

type manager struct {
	alg    Algorithm
	more   int          // states per entry besides its own: the limits' count - 1
	clock  func() int64 // tests only, in ms; nil: the request's time, see now
	origin time.Time
	seed   maphash.Seed
	rotor  atomic.Uint32
	shards [shardCount]shard
}

// entry is one key's state: its key bytes in the shard's arena, the low
// 32 bits of its hash (its home slot and a quick mismatch test), and the
// state with the time it expires. No pointers: the GC never scans it.
type entry struct {
	off  uint32 // key bytes are arena[off : off+klen&^digestFlag]
	klen uint32 // key length, with digestFlag when the key is a digest
	hash uint32
	c    uint32
	a, b int64
	exp  int64 // ms; from then on the state is empty
}

type shard struct {
	mu      sync.Mutex
	index   []uint64 // 0 empty, else hash<<32 | entry index + 1
	entries []entry
	more    []state // the other limits' states, manager.more per entry
	logs    []int64 // SlidingLog's entries, logStride per entry (see useLogs)
	arena   []byte
	dead    int // arena bytes of keys no longer in entries
	limit   int // most entries this shard holds
	cursor  int // sweep position in entries
	expired int // expired entries seen in the current sweep pass
	takes   uint32
	stride  int // states in more per entry
	// logStride is the entries an entry's logs hold in logs (the sum of
	// its limits); logOff[i] is where limit i's ring begins among them.
	logStride int
	logOff    [maxLimits + 1]int
	atCap     int // inserts at the cap since the last compaction there
	rnd       uint64
	_         [32]byte // keep shards on separate cache lines
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
		off[i+1] = off[i] + int(ls.r[i].limit)
	}
	for i := range m.shards {
		m.shards[i].logStride, m.shards[i].logOff = off[ls.n], off
	}
}

// storedKey is the form a key is kept in: itself, or for a key longer than
// maxInlineKey bytes its SHA-256 digest (written into buf), flagged so that
// it never equals a short key of the same bytes.
func storedKey(key string, buf *[sha256.Size]byte) (string, uint32) {
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

func (m *manager) take(ctx context.Context, key string, ls *limits, cost int64) (Result, error) {
	var v Result
	m.takeInto(ctx, key, ls, cost, &v)
	return v, nil
}

// takeInto is take writing its Result into v, which must be zero.
func (m *manager) takeInto(ctx context.Context, key string, ls *limits, cost int64, v *Result) {
	var buf [sha256.Size]byte
	k, klen := storedKey(key, &buf)
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
	switch {
	case ls.keyRules():
		blocked = m.alg.decideKeyInto(v, &sts, lg, now, ls, cost)
		if ls.upTo {
			cost = v.granted
		}
	case ls.upTo:
		m.alg.decideUpToInto(v, &sts, lg, now, ls, cost)
		cost = v.granted
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

func (m *manager) refund(_ context.Context, key string, ls *limits, cost int64, v *Result) (Result, error) {
	var buf [sha256.Size]byte
	k, klen := storedKey(key, &buf)
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
	after := m.alg.refundAll(&sts, lg, now, ls, cost, v)
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

// load reads the states of entry i.
func (s *shard) load(i int, sts *[maxStates]state) {
	e := &s.entries[i]
	sts[0] = state{a: e.a, b: e.b, c: e.c}
	if s.stride > 0 {
		copy(sts[1:], s.more[i*s.stride:(i+1)*s.stride])
	}
}

// rings points lg's rings at entry i's logs, and returns it.
func (s *shard) rings(i int, ls *limits, lg *logs) *logs {
	base := i * s.logStride
	for j := range ls.n {
		lg.ring[j] = s.logs[base+s.logOff[j] : base+s.logOff[j+1] : base+s.logOff[j+1]]
	}
	return lg
}

// store writes the states of entry i, which hold nothing from exp on.
func (s *shard) store(i int, sts *[maxStates]state, exp int64) {
	e := &s.entries[i]
	e.a, e.b, e.c, e.exp = sts[0].a, sts[0].b, sts[0].c, exp
	if s.stride > 0 {
		copy(s.more[i*s.stride:(i+1)*s.stride], sts[1:])
	}
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

// find returns the index of the key's entry, or -1.
func (s *shard) find(key string, klen, hash uint32) int {
	if len(s.index) == 0 {
		return -1
	}
	mask := uint32(len(s.index) - 1)
	for i := hash & mask; ; i = (i + 1) & mask {
		v := s.index[i]
		if v == 0 {
			return -1
		}
		if uint32(v>>32) == hash {
			e := &s.entries[uint32(v)-1]
			if e.klen == klen && string(s.arena[e.off:e.off+klen&^digestFlag]) == key {
				return int(uint32(v) - 1)
			}
		}
	}
}

// insert adds an entry for a key that has none. At the cap it reuses the
// slot of a victim (sampling prefers expired entries, whose exp is lowest),
// and compacts the shard at most once per limit/capCompact such inserts, so a
// flood of new keys at the cap costs O(1) a key, not a scan of the shard.
func (s *shard) insert(key string, klen, hash uint32, now int64) int {
	if len(s.entries) >= s.limit {
		if s.atCap++; s.atCap >= max(16, s.limit/capCompact) {
			s.atCap = 0
			s.compact(now)
		}
		if len(s.entries) >= s.limit {
			return s.replace(s.victim(), key, klen, hash)
		}
	}
	if (len(s.entries)+1)*4 > len(s.index)*3 {
		s.compact(now)
		if (len(s.entries)+1)*4 > len(s.index)*3 {
			s.rebuild(len(s.index) * 2)
		}
	}
	off := s.appendKey(key)
	s.entries = append(s.entries, entry{off: off, klen: klen, hash: hash})
	for range s.stride {
		s.more = append(s.more, state{})
	}
	s.growLogs()
	s.place(hash, uint32(len(s.entries)))
	return len(s.entries) - 1
}

// growLogs adds a zeroed log part for a new entry. The logs grow as
// append would, but never beyond the shard's cap of keys, so that the
// logs of a full manager take what logMemory allows and no spare room.
func (s *shard) growLogs() {
	if s.logStride == 0 {
		return
	}
	n := len(s.logs) + s.logStride
	if n > cap(s.logs) {
		grown := make([]int64, len(s.logs), max(n, min(2*cap(s.logs)+s.logStride, s.limit*s.logStride)))
		copy(grown, s.logs)
		s.logs = grown
	}
	s.logs = s.logs[:n]
	clear(s.logs[n-s.logStride:])
}

func (s *shard) appendKey(key string) uint32 {
	off := uint32(len(s.arena))
	s.arena = append(s.arena, key...)
	return off
}

// place puts hash|ref into the first free slot of the hash's probe sequence.
func (s *shard) place(hash, ref uint32) {
	mask := uint32(len(s.index) - 1)
	i := hash & mask
	for s.index[i] != 0 {
		i = (i + 1) & mask
	}
	s.index[i] = uint64(hash)<<32 | uint64(ref)
}

// victim picks the entry to drop at the cap: of a few sampled at random, the
// one that expires first, whose state is closest to meaning nothing anyway.
func (s *shard) victim() int {
	best := -1
	for range evictSample {
		s.rnd ^= s.rnd << 13
		s.rnd ^= s.rnd >> 7
		s.rnd ^= s.rnd << 17
		i := int(s.rnd % uint64(len(s.entries)))
		if best < 0 || s.entries[i].exp < s.entries[best].exp {
			best = i
		}
	}
	return best
}

// replace gives entry i to a new key, in the index too.
func (s *shard) replace(i int, key string, klen, hash uint32) int {
	e := &s.entries[i]
	s.unplace(e.hash, uint32(i+1))
	s.dead += int(e.klen &^ digestFlag)
	*e = entry{off: s.appendKey(key), klen: klen, hash: hash}
	clear(s.more[i*s.stride : (i+1)*s.stride])
	s.place(hash, uint32(i+1))
	if s.dead > 4096 && s.dead > len(s.arena)/2 {
		s.rebuild(len(s.index))
	}
	return i
}

// unplace removes ref from the index, shifting later slots of the same
// probe run back so that no lookup stops early (linear-probing deletion).
func (s *shard) unplace(hash, ref uint32) {
	mask := uint32(len(s.index) - 1)
	i := hash & mask
	for uint32(s.index[i]) != ref {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		home := uint32(s.index[j]>>32) & mask
		// Move j into the hole at i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.index[i] = s.index[j]
			i = j
		}
	}
	s.index[i] = 0
}

// sweep looks at up to n entries at the cursor, counting the expired ones;
// at the end of a pass it compacts the shard if at least half were expired.
func (s *shard) sweep(now int64, n int) {
	for ; n > 0 && len(s.entries) > 0; n-- {
		if s.cursor >= len(s.entries) {
			expired := s.expired
			s.cursor, s.expired = 0, 0
			if expired*2 >= len(s.entries) {
				s.compact(now)
				return
			}
		}
		if s.entries[s.cursor].exp <= now {
			s.expired++
		}
		s.cursor++
	}
}

// compact drops expired entries and rebuilds the index and arena to fit the
// rest; memory is reallocated when the old arrays are far too large.
func (s *shard) compact(now int64) {
	live := s.entries[:0] // filtered in place: writes never pass reads
	more := s.more[:0]
	lgs := s.logs[:0]
	for i, e := range s.entries {
		if e.exp > now {
			live = append(live, e)
			more = append(more, s.more[i*s.stride:(i+1)*s.stride]...)
			lgs = append(lgs, s.logs[i*s.logStride:(i+1)*s.logStride]...)
		}
	}
	if cap(live) > 4*len(live)+64 {
		live = append(make([]entry, 0, len(live)+len(live)/8), live...)
		if s.stride > 0 {
			more = append(make([]state, 0, cap(live)*s.stride), more...)
		}
		if s.logStride > 0 {
			lgs = append(make([]int64, 0, cap(live)*s.logStride), lgs...)
		}
	}
	s.entries, s.more, s.logs = live, more, lgs
	s.cursor, s.expired = 0, 0
	size := minIndex
	if n := len(live) * 4 / 3; n >= minIndex {
		size = 1 << bits.Len(uint(n))
	}
	s.rebuild(size)
}

// observeRebuild, when set (tests and benchmarks only), is told how long each rebuild
// took: the longest pause housekeeping puts on a request.
var observeRebuild func(time.Duration)

// rebuild packs the live keys into a new arena and indexes every entry in a
// table of size slots (a power of two).
func (s *shard) rebuild(size int) {
	if observeRebuild != nil {
		defer func(start time.Time) { observeRebuild(time.Since(start)) }(time.Now())
	}
	var keys int
	for i := range s.entries {
		keys += int(s.entries[i].klen &^ digestFlag)
	}
	arena := make([]byte, 0, keys)
	for i := range s.entries {
		e := &s.entries[i]
		n := e.klen &^ digestFlag
		off := uint32(len(arena))
		arena = append(arena, s.arena[e.off:e.off+n]...)
		e.off = off
	}
	s.arena, s.dead = arena, 0
	if len(s.index) == size {
		clear(s.index)
	} else {
		s.index = make([]uint64, size)
	}
	for i := range s.entries {
		s.place(s.entries[i].hash, uint32(i+1))
	}
}
