package quota

import (
	"math"
	"time"
)

// leaseEntry is what a replica keeps of a key it leases, or may: how busy
// the key is, and from its first share on, the share.
type leaseEntry struct {
	key string // its own copy, the table's key
	// The units taken in the lease-long period from since (ms), and in the
	// one before it: how busy the key is, and what a share should hold.
	since, units, before int64
	// directUntil is when (ms) the key may be leased again after a share
	// too short to be worth its return (see granted), or a failed grant.
	directUntil int64
	// refilledAt is when (ms) a token bucket's debt, as the key's last
	// answer from the store told it, will have refilled (see deep).
	refilledAt int64
	// penalties counts Penalize calls on the key: a grant under way when
	// one comes brings a share that is ended at once.
	penalties uint32
	share     *share
	// pending is closed when the grant under way for the key is answered;
	// failed says that the last grant got no answer from the store.
	pending chan struct{}
	failed  bool
	// queuedAt is when the end queued for the key's share comes (see
	// leaseReturns), 0 when none is queued.
	queuedAt int64
}

// share is a key's share of its quota in the store: the units granted,
// how many of them this replica has used, until when, and what the store
// said of the key at the grant; or, when the store had no room, until
// when its rejection stands.
type share struct {
	id          uint64 // names the share's takes for Refund; 0 when none is out
	taken, used int64  // the units the grant counted in the store, and those spent
	at, ends    int64  // ms: when the grant was sent; the lease's end (exclusive)
	grant       Result // the store's answer to the grant, its times from at
	// deniedUntil is when (ms) the store's last rejection (in grant)
	// stops answering for it.
	deniedUntil int64
	// left is the least Remaining of the limits after the last grant,
	// and grantedBefore the units of the grant before it: between them,
	// what others took (peers).
	left, grantedBefore int64
	peers               int64 // replicas taking from the key, as estimated, >= 1
}

// count records a take of cost units at now.
func (e *leaseEntry) count(now, cost, lease int64) {
	if elapsed := now - e.since; elapsed >= lease {
		e.before = 0
		if elapsed < 2*lease {
			e.before = e.units
		}
		e.since, e.units = now, 0
	}
	e.units += cost
}

// hot reports whether the key is busy enough to lease.
func (e *leaseEntry) hot() bool { return max(e.units, e.before) >= hotUnits }

// idle reports whether the entry tracks nothing worth keeping at now: no
// share out, no grant under way, no take in the last two leases.
func (e *leaseEntry) idle(now, lease int64) bool {
	if e.pending != nil || now-e.since < 2*lease {
		return false
	}
	return e.share == nil || e.share.id == 0 && now >= e.share.deniedUntil
}

// local answers a take of cost at now from the share, when it can: from
// its units while the lease runs, or with the store's rejection while
// that stands.
func (e *leaseEntry) local(n int, now, cost int64) (Result, bool) {
	sh := e.share
	switch {
	case sh == nil:
		return Result{}, false
	case sh.id != 0 && now < sh.ends && sh.used+cost <= sh.taken:
		sh.used += cost
		return sh.admitted(n, now), true
	case sh.id == 0 && now < sh.deniedUntil && cost == 1:
		// The store's rejection of a grant is that of a single unit: a
		// take of more goes to the store for the wait of its cost.
		return sh.rejected(n, now), true
	}
	return Result{}, false
}

// want is the size of the next share, for a take of cost: what the key
// took in a lease lately (a quarter more for the windows, whose unused
// units go back), but at most the room the store last told divided among
// twice the replicas taking from it, so that replicas near the limit do
// not hold each other's units; at least cost.
func (e *leaseEntry) want(cost, capacity int64, alg Algorithm) int64 {
	n := max(e.units, e.before)
	if alg != TokenBucket {
		n += n / 4
	}
	room := capacity
	peers := int64(1)
	if sh := e.share; sh != nil {
		room, peers = sh.left, sh.peers
	}
	return max(cost, 1, min(n, room/(2*peers)))
}

// detach ends the share that is out, if any, and returns what goes back to
// the store: its unused units, as a refund of its take.
func (e *leaseEntry) detach(s *leasedStore) *leaseReturn {
	sh := e.share
	if sh == nil || sh.id == 0 {
		return nil
	}
	sh.id = 0
	if sh.used >= sh.taken || s.alg == TokenBucket {
		return nil // a bucket's unused units refill (errLeasedBucketRefund)
	}
	back := &leaseReturn{key: e.key, units: sh.taken - sh.used, n: sh.grant.n}
	for i := range back.n {
		back.countedIn[i] = sh.grant.each[i].countedIn
	}
	return back
}

// granted keeps the store's answer v to a grant sent at at: taken units
// counted (none when it rejected), which the share may spend until the
// lease's end (length).
func (e *leaseEntry) granted(v *Result, taken, at int64, s *leasedStore) {
	sh := e.share
	if sh == nil {
		sh = &share{peers: 1}
		e.share = sh
	}
	left := v.each[0].Remaining
	for i := 1; i < v.n; i++ {
		left = min(left, v.each[i].Remaining)
	}
	if taken > 0 && sh.grantedBefore > 0 {
		// Between the last grant and this one, the store's room went from
		// left to the new left+taken: what others took, as a count of
		// shares like this replica's, is how many others there are.
		others := max(0, sh.left-(int64(left)+taken))
		sh.peers = max(1, min(64, (sh.peers+1+others/sh.grantedBefore+1)/2))
	}
	sh.left = int64(left)
	if taken > 0 {
		sh.grantedBefore = taken
	}
	sh.taken, sh.used, sh.at, sh.grant = taken, 0, at, *v
	sh.grant.source = SourceLease
	if taken == 0 {
		sh.id = 0
		sh.deniedUntil = at + min(s.lease, ceilDiv(int64(v.RetryAfter()), int64(time.Millisecond)))
		return
	}
	sh.id = s.nextID.Add(1)
	sh.deniedUntil = 0
	length := sh.length(s)
	sh.ends = at + length
	if (e.queuedAt == 0 || sh.ends < e.queuedAt) && s.returns.due(e.key, sh.ends) {
		e.queuedAt = sh.ends
	}
	if length < s.lease/8 {
		// A share that must end this soon (its window ends, or a bucket
		// too full to lease from) would cost a return for every
		// grant: the key's next takes go to the store, for an eighth of a
		// lease.
		e.directUntil = at + max(1, s.lease/8)
	}
}

// length is how long (ms) the share may be spent from its grant (see
// leasedStore): Config.Lease, or less where the grant's limits need. A
// step is taken off every time the store answered in, for its rounding.
func (sh *share) length(s *leasedStore) int64 {
	n := s.lease
	for i := range s.base.n {
		r := &s.base.r[i]
		left := int64(sh.grant.each[i].ResetAfter/time.Millisecond) - r.stepMillis()
		switch s.alg {
		case SlidingWindow:
			// Counted in the window running, which ends a window before
			// its counts are gone.
			left -= r.stepMillis() * r.window
		case TokenBucket:
			// The debt below the share refills in ResetAfter less the
			// time the share's own units take to refill.
			left -= r.stepMillis() * ceilDiv(sh.taken*r.window, r.max)
		}
		n = min(n, left)
	}
	return max(0, n)
}

// deep reports whether a token bucket's debt, as the key's last answer
// told it, lasts a lease past now: a grant then makes a share of a whole
// lease (length: the debt below the share is the debt before it). Else a
// grant would give a share too short to spend, whose units the bucket
// would lose (they are not given back): the take goes to the store
// instead, and tells the debt anew (told).
func (e *leaseEntry) deep(now int64, s *leasedStore) bool {
	for i := range s.base.n {
		if e.refilledAt-now < s.lease+2*s.base.r[i].stepMillis() {
			return false
		}
	}
	return true
}

// told keeps when the debt the store's answer v at at tells of will have
// refilled, for deep: the earliest of its limits'.
func (e *leaseEntry) told(v *Result, at int64) {
	until := int64(math.MaxInt64)
	for i := range v.n {
		until = min(until, at+int64(v.each[i].ResetAfter/time.Millisecond))
	}
	e.refilledAt = until
}

// admitted is the Result of a take admitted from the share at now: the
// grant's, with the key's remaining at the grant less what this replica
// has used since, and its times moved on.
func (sh *share) admitted(n int, now int64) Result {
	v := sh.grant
	v.lease = sh.id
	gone := time.Duration(now-sh.at) * time.Millisecond
	for i := range n {
		d := &v.each[i]
		d.Allowed, d.RetryAfter = true, 0
		d.Remaining = int(min(int64(d.Limit), max(0, int64(d.Remaining)+sh.taken-sh.used)))
		d.ResetAfter = max(0, d.ResetAfter-gone)
	}
	return v
}

// rejected is the Result of a take rejected at now while the store's
// rejection stands: the grant's, its times moved on.
func (sh *share) rejected(n int, now int64) Result {
	v := sh.grant
	gone := time.Duration(now-sh.at) * time.Millisecond
	for i := range n {
		d := &v.each[i]
		d.Allowed = false
		d.ResetAfter = max(0, d.ResetAfter-gone)
		if d.RetryAfter > 0 && d.RetryAfter != Never {
			d.RetryAfter = max(time.Millisecond, d.RetryAfter-gone)
		}
	}
	return v
}
