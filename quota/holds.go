package quota

import (
	"sync"
	"sync/atomic"
)

// holds keeps the operators' holds (Limiter.Block) of an in-memory
// limiter, apart from the keys' entries: an entry keeps the ends of a
// key's rules only when the limiter has some (BlockFor, MinInterval), and
// a hold must hold any key. A take looks here only while some hold is
// kept (count), one atomic load otherwise.
type holds struct {
	count atomic.Int64 // len(ends)
	mu    sync.Mutex
	ends  map[string]int64 // entry key (entryKey) -> the hold's end, ms on the manager's clock
	most  int
}

// end returns when key's hold ends, 0 for none.
func (h *holds) end(key string) int64 {
	if h.count.Load() == 0 {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ends[key]
}

// set holds key until end, replacing its hold, unless h keeps most holds
// that have not ended at now: it reports whether it did.
func (h *holds) set(key string, end, now int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ends == nil {
		h.ends = make(map[string]int64)
	}
	if _, ok := h.ends[key]; !ok && len(h.ends) >= h.most {
		for k, e := range h.ends {
			if e <= now {
				delete(h.ends, k)
			}
		}
		if len(h.ends) >= h.most {
			return false
		}
	}
	h.ends[key] = end
	h.count.Store(int64(len(h.ends)))
	return true
}

// drop lifts key's hold.
func (h *holds) drop(key string) {
	if h.count.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ends, key)
	h.count.Store(int64(len(h.ends)))
}
