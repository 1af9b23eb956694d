package quota

// holds keeps the operators' holds (Limiter.Block) of an in-memory
// limiter's shard, apart from its entries: an entry keeps the ends of a
// key's rules only when the limiter has some (BlockFor, MinInterval), and
// a hold must hold any key. The shard's lock guards it, which a take holds
// already: while no hold runs (until), a take's look costs a comparison.
type holds struct {
	until int64            // the latest end of a hold kept (ms), 0 for none
	ends  map[string]int64 // entry key (entryKey) -> the hold's end, ms on the manager's clock
}

// end returns when key's hold ends at now, 0 for none that runs.
func (h *holds) end(key string, now int64) int64 {
	if h.until <= now {
		return 0
	}
	if end := h.ends[key]; end > now {
		return end
	}
	return 0
}

// set holds key until end, replacing its hold, unless h keeps most holds
// that have not ended at now: it reports whether it did.
func (h *holds) set(key string, end, now int64, most int) bool {
	if h.ends == nil || h.until <= now {
		h.ends = make(map[string]int64) // every hold has ended
	}
	if _, ok := h.ends[key]; !ok && len(h.ends) >= most {
		for k, e := range h.ends {
			if e <= now {
				delete(h.ends, k)
			}
		}
		if len(h.ends) >= most {
			return false
		}
	}
	h.ends[key] = end
	h.until = max(h.until, end)
	return true
}

// drop lifts key's hold.
func (h *holds) drop(key string) {
	if h.until == 0 {
		return
	}
	delete(h.ends, key)
	if len(h.ends) == 0 {
		h.until = 0
	}
}
