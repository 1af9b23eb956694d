package quota

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// memorySlots holds a Concurrency's slots in this process: per key the
// slots taken (a request's id and its slot's expiry), in a map split in
// shards, each under its own mutex. A key is removed when its last slot is
// released, so the map holds only keys with requests in flight, or with
// slots that were never released (until they expire and a full shard
// reclaims them). Each shard keeps the last set it removed for reuse, so
// a key whose requests come one after another costs no allocation. No
// goroutine: expired slots are dropped when their key is next acquired.
type memorySlots struct {
	max      int
	exp      int64 // ns
	perShard int   // keys a shard may hold
	mask     uint64
	seed     maphash.Seed
	shards   []slotShard
	ids      atomic.Uint64
	origin   time.Time
	now      func() int64 // ns since origin; tests set it
}

type slotShard struct {
	mu    sync.Mutex
	keys  map[string]*slotSet
	spare *slotSet // the last set removed, for reuse
	_     [40]byte // a cache line of its own
}

// slotSet is one key's slots.
type slotSet struct {
	key  string // the map's key: a copy of the caller's
	held []heldSlot
}

// heldSlot is one request's slot: its id and when it expires (ns).
type heldSlot struct {
	id      uint64
	expires int64
}

// reclaimScan is how many keys a full shard looks at for one whose slots
// have all expired, before it rejects a new key.
const reclaimScan = 64

func newMemorySlots(max int, exp time.Duration, maxKeys int) *memorySlots {
	n := 1
	if maxKeys >= 64*64 {
		n = 64 // a shard per core or so, each with a fair share of MaxKeys
	}
	m := &memorySlots{max: max, exp: int64(exp), perShard: (maxKeys + n - 1) / n, mask: uint64(n - 1),
		seed: maphash.MakeSeed(), shards: make([]slotShard, n), origin: time.Now()}
	m.now = func() int64 { return int64(time.Since(m.origin)) }
	for i := range m.shards {
		m.shards[i].keys = make(map[string]*slotSet)
	}
	return m
}

func (m *memorySlots) shard(key string) *slotShard {
	if m.mask == 0 {
		return &m.shards[0]
	}
	return &m.shards[maphash.String(m.seed, key)&m.mask]
}

// acquire takes a slot of key if one is free, answering as source.
func (m *memorySlots) acquire(key string, source Source) Slot {
	now := m.now()
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.keys[key]
	if set == nil {
		if len(sh.keys) >= m.perShard && !sh.reclaim(now) {
			// Full of keys with slots in flight: a request of a new key
			// cannot be counted, so it is not admitted.
			return Slot{limit: m.max, source: source, retryAfter: slotRetry}
		}
		set = sh.spare
		sh.spare = nil
		switch {
		case set == nil:
			set = &slotSet{key: strings.Clone(key)}
		case set.key != key:
			set.key = strings.Clone(key)
		}
		sh.keys[set.key] = set
	}
	set.dropExpired(now)
	if len(set.held) >= m.max {
		return Slot{limit: m.max, source: source, retryAfter: slotRetry}
	}
	id := m.ids.Add(1)
	set.held = append(set.held, heldSlot{id: id, expires: now + min(m.exp, math.MaxInt64-now)})
	return Slot{allowed: true, holder: heldInMemory, source: source, limit: m.max, remaining: m.max - len(set.held), key: set.key, id: id}
}

// release frees the slot id of key, if it is still held, and reports
// whether it was.
func (m *memorySlots) release(key string, id uint64) bool {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := sh.keys[key]
	if set == nil {
		return false
	}
	for i, h := range set.held {
		if h.id == id {
			last := len(set.held) - 1
			set.held[i] = set.held[last]
			set.held = set.held[:last]
			if last == 0 {
				sh.remove(set)
			}
			return true
		}
	}
	return false
}

// remove forgets set, which holds no slot, keeping it for reuse.
func (sh *slotShard) remove(set *slotSet) {
	delete(sh.keys, set.key)
	if cap(set.held) <= 64 { // a set grown by a large Max is left to the GC
		sh.spare = set
	}
}

// reclaim removes up to reclaimScan keys whose slots have all expired, and
// reports whether it removed any.
func (sh *slotShard) reclaim(now int64) bool {
	seen, freed := 0, false
	for _, set := range sh.keys {
		if seen++; seen > reclaimScan {
			break
		}
		if set.dropExpired(now); len(set.held) == 0 {
			sh.remove(set)
			freed = true
		}
	}
	return freed
}

// dropExpired drops the slots whose expiry has passed at now.
func (s *slotSet) dropExpired(now int64) {
	kept := s.held[:0]
	for _, h := range s.held {
		if h.expires > now {
			kept = append(kept, h)
		}
	}
	s.held = kept
}

// keyCount is how many keys hold slots, for tests.
func (m *memorySlots) keyCount() int {
	n := 0
	for i := range m.shards {
		m.shards[i].mu.Lock()
		n += len(m.shards[i].keys)
		m.shards[i].mu.Unlock()
	}
	return n
}
