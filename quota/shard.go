package quota

import (
	"math/bits"
	"sync"
	"time"
)

// A shard of the in-memory manager is an open-addressing hash table of its
// own making, under its own mutex: entries without pointers, their key
// bytes packed in an arena, their other limits' states in more and a
// SlidingLog's entries in logs, all at the entry's index. Why a table of
// our own, and how it is swept and compacted, is told at the top of
// memory.go.

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
	holds     holds    // the operators' holds of the shard's keys
	_         [32]byte // keep shards on separate cache lines
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
