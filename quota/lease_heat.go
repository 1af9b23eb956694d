package quota

import "sync/atomic"

// leaseHeat tells busy keys from the rest without keeping the rest: two
// fixed arrays of counters, a key's counter in each picked by its hash,
// each one word holding the units taken in the lease-long period running
// and in the one before it. A key is as busy as the lesser of its two
// counters says (a count-min sketch): keys that share one counter with a
// busy key, or with many others, rarely share the other too. A take of a
// key that is not busy costs two atomic updates, with no lock, map lookup
// or allocation: 100,000 keys of one request each pay no more than that.
// A key that looks busier than it is costs the lease table an entry, whose
// own count then decides (leaseEntry.hot).
type leaseHeat struct {
	slots [2][leaseHeatSlots]atomic.Uint64
}

// leaseHeatBits sizes the counters: 2 × 2^16 of them, 1 MiB, so that at
// 100,000 takes a lease of keys taken once each a counter sees about 1.5
// units, and both of a key's counters reach hotUnits for about 1 key in 50.
const (
	leaseHeatBits  = 16
	leaseHeatSlots = 1 << leaseHeatBits
)

// A counter's word: the period's number (from 0 each 2^32 periods) in the
// high 32 bits, then the units of the period before and of the period
// running, 16 bits each, saturating.
const (
	heatUnitsMax = 1<<16 - 1
	heatUnitBits = 16
)

// add counts cost units of the key of hash h in period, and returns the
// units of the period running (with these) and of the one before, as the
// lesser of the key's two counters says.
func (h *leaseHeat) add(hash uint64, period, cost int64) (units, before int64) {
	u0, b0 := addHeat(&h.slots[0][hash>>(64-leaseHeatBits)], period, cost)
	u1, b1 := addHeat(&h.slots[1][hash>>6&(leaseHeatSlots-1)], period, cost)
	return min(u0, u1), min(b0, b1)
}

// addHeat counts cost units in period on the counter slot.
func addHeat(slot *atomic.Uint64, period, cost int64) (units, before int64) {
	p := uint64(uint32(period))
	for {
		old := slot.Load()
		cur, prev := old&heatUnitsMax, old>>heatUnitBits&heatUnitsMax
		switch old >> 32 {
		case p:
		case uint64(uint32(period - 1)):
			prev, cur = cur, 0
		default:
			prev, cur = 0, 0
		}
		cur = min(heatUnitsMax, cur+uint64(min(cost, heatUnitsMax)))
		if slot.CompareAndSwap(old, p<<32|prev<<heatUnitBits|cur) {
			return int64(cur), int64(prev)
		}
	}
}
