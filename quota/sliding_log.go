package quota

import (
	"fmt"

	"github.com/fiberlimit/limiter/internal/redisengine"
)

// slidingLog is the exact log's step function, the twin of
// storage/redis/sliding_log.lua, in its order: the state, its
// plausibility, the entries live at now, the adjustments, the take and the
// expiry. It keeps the time of every unit counted in the last window, and
// admits a take while the units in the window ending now, with the take's
// cost, stay within the limit.
//
// State: newest, the time of the newest entry (steps), count, the entries
// in the log, and head, the ring index of the oldest (read and state name
// them; the Lua twin keeps the entries themselves in a string).
//
// The entries live in a ring of r.max slots that the backend keeps for
// the key (see logs): a take reads them and changes only the state; the
// backend then writes an admitted take's entries (logs.record), so that a
// decision under several limits, one of which rejects, leaves every ring
// as it was. Adjustments (refund, penalty, reward) write the ring
// themselves. A cost of n is n entries of the same time.
type slidingLog struct{}

// read is s as the sliding log names it.
func (slidingLog) read(s state) (newest, count, head int64) { return s.a, s.b, int64(s.c) }

// state is the state of newest, count and head.
func (slidingLog) state(newest, count, head int64) state {
	return state{a: newest, b: count, c: uint32(head)}
}

// plausible reads s as a state of r at now (steps; see
// Algorithm.plausibleAll): a newest entry too far ahead
// (rule.tooFarAhead) is no state. A log of more than the limit's entries
// (from before Max was lowered) is read as its newest limit entries by
// live.
func (g slidingLog) plausible(s *state, now int64, r rule, _ bool) {
	newest, count, head := g.read(*s)
	if r.tooFarAhead(newest, now) {
		newest, count, head = 0, 0, 0
	}
	*s = g.state(newest, max(0, count), head)
}

// live drops the entries of s that have left the window ending at now
// (those at or before now - window) and any beyond the limit's newest,
// and returns the time that counts as
// now for the key (never before its newest entry), the oldest's index
// and how many are left. The entries are in time order: a binary search.
func (g slidingLog) live(s state, ring []int64, now int64, r rule) (at, head, n int64) {
	newest, n, head := g.read(s)
	if n == 0 {
		return now, 0, 0
	}
	now = max(now, newest) // time never goes back for a key
	lo, hi := int64(0), n
	for lo < hi {
		mid := int64(uint64(lo+hi) >> 1)
		if logAt(ring, head, mid) > now-r.window {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	head, n = head+lo, n-lo
	if over := n - r.max; over > 0 {
		// A log kept from before Max was lowered: its newest limit
		// entries, as the Lua twin reads it.
		head, n = head+over, r.max
	}
	return now, head % int64(len(ring)), n
}

// adjust applies adj of cost units to s and its ring at now (see
// adjustment): a penalty enters cost entries at now (dropping the oldest
// when the log is full), a reward takes out the newest, and a refund
// takes out up to cost entries of the time the take was counted at.
func (g slidingLog) adjust(adj adjustment, s state, ring []int64, now int64, r rule, cost int64, d Decision) state {
	at := now
	now, head, n := g.live(s, ring, now, r)
	newest, _, _ := g.read(s)
	switch adj {
	case penalty:
		k := min(cost, r.max)
		if over := n + k - r.max; over > 0 {
			head, n = (head+over)%int64(len(ring)), n-over
		}
		for j := n; j < n+k; j++ {
			ring[(head+j)%int64(len(ring))] = now
		}
		n += k
		if k > 0 {
			newest = now
		}
	case reward:
		k := min(cost, n)
		if newest > at && k > 0 && (k == n || logAt(ring, head, n-1-k) < newest) {
			k = 0 // its newest entries lie ahead: see the refund's below
		}
		n -= k
	default:
		// The entries of the take's time end where the first later one
		// begins; up to cost of them go, and the later ones move back.
		end := n
		for end > 0 && logAt(ring, head, end-1) > d.countedIn {
			end--
		}
		k := int64(0)
		for k < min(cost, end) && logAt(ring, head, end-1-k) == d.countedIn {
			k++
		}
		if end == n && d.countedIn > at && (k == end || logAt(ring, head, end-1-k) < d.countedIn) {
			// A turn ahead (Reserve) whose entries are the newest: taking
			// them out would move the key's clock back, before the entries
			// the log let go when they were made. It is not given back.
			k = 0
		}
		for j := end; j < n; j++ {
			ring[(head+j-k)%int64(len(ring))] = logAt(ring, head, j)
		}
		n -= k
	}
	if n == 0 {
		return state{}
	}
	if adj != penalty {
		newest = logAt(ring, head, n-1)
	}
	return g.state(newest, n, head)
}

func (g slidingLog) take(s *state, ring []int64, now int64, r rule, cost int64) Decision {
	now, head, n := g.live(*s, ring, now, r)
	oldest := now
	if n > 0 {
		oldest = logAt(ring, head, 0)
	}
	d := Decision{Limit: int(r.max)}
	switch {
	case cost > r.max:
		d.RetryAfter = Never
	case n+cost <= r.max:
		n += cost
		newest, _, _ := g.read(*s)
		if cost > 0 {
			newest = now
		}
		*s = state{}
		if n > 0 {
			*s = g.state(newest, n, head)
		}
		d.Allowed = true
		d.countedIn = now
	default:
		// The take fits once the entries before it have left: the
		// (n+cost-limit)-th oldest is the last that must go.
		// (Within a window: a log of other times holds no longer.)
		d.RetryAfter = r.span(min(r.window, logAt(ring, head, n+cost-r.max-1)-now+r.window))
	}
	d.Remaining = int(max(0, r.max-n))
	if n > 0 {
		d.ResetAfter = r.span(min(r.window, oldest-now+r.window)) // when the oldest leaves
	}
	return d
}

func (g slidingLog) expiry(s state, r rule) int64 {
	newest, count, _ := g.read(s)
	if count == 0 {
		return 0
	}
	return newest + r.window // when the newest entry leaves
}

// logs are the rings of one key's logs, one per limit, each of its
// limit's length; nil for the other algorithms.
type logs struct{ ring [maxLimits][]int64 }

// ringOf is the ring of limit i, nil when lg is.
func (lg *logs) ringOf(i int) []int64 {
	if lg == nil {
		return nil
	}
	return lg.ring[i]
}

// record writes the entries of a take of cost admitted under every limit
// of ls, which each step counted in its state (count) at its newest time.
func (lg *logs) record(sts *[maxStates]state, ls *limits, cost int64) {
	for i := range ls.n {
		newest, count, head := slidingLog{}.read(sts[i])
		ring := lg.ring[i]
		for k := count - cost; k < count; k++ {
			ring[(head+k)%int64(len(ring))] = newest
		}
	}
}

// logAt returns the k-th oldest entry of a log whose oldest is at head.
func logAt(ring []int64, head, k int64) int64 {
	return ring[(head+k)%int64(len(ring))]
}

// MaxLogLimit is the most entries a SlidingLog key keeps, 10,000: the
// largest Max of a limit, and of the Max of all its Limits together. A key
// keeps one entry per unit of Max (8 bytes in memory, 6 on Redis), and a
// Redis call reads and rewrites them all: at 10,000 it costs Redis about
// 0.3-0.6 ms, at 4 limits of 10,000 about 2 ms, which a few dozen callers
// of one key queue past StorageTimeout.
const MaxLogLimit = redisengine.MaxLogLimit

// checkLogEntries checks that the logs of a SlidingLog key under ls hold
// at most MaxLogLimit entries in all (each limit's alone is checked
// before).
func checkLogEntries(ls []Limit) error {
	total := 0
	for _, l := range ls {
		total += l.Max
	}
	if total > MaxLogLimit {
		return fmt.Errorf("limiter: the Max of Limits add up to %d; SlidingLog keeps one entry per unit of Max and a key at most %d in all, which a decision on Redis reads and rewrites (for larger limits, SlidingWindow estimates the same windows in two counters)", total, MaxLogLimit)
	}
	return nil
}

// logMemory bounds what the in-memory manager's logs hold, in bytes: a
// key's logs take 8 bytes per unit of each limit's Max, so under
// SlidingLog the manager keeps at most logMemory / (64 + 8 × the sum of
// Max) keys when MaxKeys allows more (about 310,000 keys at Max 100, 3,300
// at Max 10,000), and a shard's logs, 1 MiB, are copied in well under a
// millisecond when it grows or is compacted. Past that a new key takes the place of one that ends soon, as
// at MaxKeys.
const logMemory = 256 << 20

// memoryKeys is the most keys an in-memory manager of alg under ls keeps,
// given MaxKeys.
func memoryKeys(alg Algorithm, ls *limits, maxKeys int) int {
	if alg != SlidingLog {
		return maxKeys
	}
	perKey := int64(64)
	for i := range ls.n {
		perKey += 8 * ls.r[i].max
	}
	// A whole number of keys a shard, rounded down, so that the shards'
	// caps (see newManager) add up to no more than logMemory holds.
	fit := max(shardCount, logMemory/perKey/shardCount*shardCount)
	return int(min(int64(maxKeys), fit))
}
