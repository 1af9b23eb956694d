package quota

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Leases (Config.Lease) let a replica decide a busy key's requests from a
// share of the key's quota, taken from the store in one call, instead of
// one call per request.
//
// A share is a take of as many units as fit (TakeUpTo's), counted in the
// store like any take, so the shares of every replica and the takes
// decided in the store add up to no more than the limit admits: nothing
// is admitted that the store did not count first. What keeps it exact is
// when a share may be spent, since a unit counted at the grant is spent
// later (share.length):
//   - the windows: only while the window that counted it runs (a unit
//     counted in one window and spent in the next would be counted in
//     neither);
//   - the token bucket: only while the debt the grant found below the
//     share has not refilled, so that the bucket, as the store keeps it,
//     cannot refill past full while the share is out (the refill it would
//     lose at full is what a unit spent later would need). That holds only
//     while nothing lowers the debt but time: a bucket with leases takes
//     no refund and no reward, and its shares give nothing back.
//
// The lease ends at the earliest of these and Config.Lease, timed on this
// replica's monotonic clock from when the grant was sent: the time the
// call took, and whatever offset there is between this replica's clock
// and the store's, only shorten it. (A client clock, Config.Now, which
// the store would decide by, is refused: replicas' clocks may be apart.) What a
// window's share did not spend then goes back as the refund of the
// share's take, credited in the window that counted it, by a timer of
// the limiter (leaseReturns).
//
// Keys that are not busy (fewer than hotUnits units in a lease, as
// leaseHeat counts them) are decided in the store as without leases; a
// busy key gets an entry in a bounded table, and a share.
type leasedStore struct {
	guard    *guardedStore
	base     limits // the Limiter's, copied: a timer that outlives it holds no pointer into it
	alg      Algorithm
	lease    int64 // Config.Lease, ms, at most operatorReach
	perShard int   // entries a shard tracks at most
	capacity int64 // the largest cost every limit can admit
	seed     maphash.Seed
	nextID   atomic.Uint64
	returns  leaseReturns
	heat     leaseHeat
	shards   [leaseShardCount]leaseShard
}

// leaseShardCount is how many locks the lease table is spread over.
const leaseShardCount = 64

// leaseKeysMost bounds the keys the lease table tracks, whatever MaxKeys
// says: it needs only the keys of the last two leases, and a Go map keeps
// its memory after its keys go.
const leaseKeysMost = 1 << 17

// hotUnits is how many units a key must take within a lease to be
// leased: a key of a few takes a lease gains nothing from a share.
const hotUnits = 3

// leaseShard tracks a part of the keys, each under its own copy of the
// key's string.
type leaseShard struct {
	mu   sync.Mutex
	keys map[string]*leaseEntry
}

func newLeasedStore(guard *guardedStore, base limits, alg Algorithm, lease time.Duration, maxKeys int) *leasedStore {
	s := &leasedStore{
		guard: guard, base: base, alg: alg,
		lease:    max(1, min(lease.Milliseconds(), operatorReach)),
		perShard: max(1, min(maxKeys, leaseKeysMost)/leaseShardCount),
		seed:     maphash.MakeSeed(),
	}
	for i := range s.shards {
		s.shards[i].keys = make(map[string]*leaseEntry)
	}
	s.capacity = capacity(alg, base.r[0])
	for _, r := range base.r[1:base.n] {
		s.capacity = min(s.capacity, capacity(alg, r))
	}
	s.returns.store = s
	return s
}

func (s *leasedStore) shard(key string) *leaseShard {
	return s.shardOf(maphash.String(s.seed, key))
}

// shardOf is the shard of the key of hash h.
func (s *leasedStore) shardOf(h uint64) *leaseShard {
	return &s.shards[h%leaseShardCount]
}

// track adds an entry for key at now, making room when the shard is
// full: idle entries go, and then cold ones (no share, fewer than
// hotUnits units), so that a flood of new keys cannot keep a busy one
// out; nil when every entry looked at is busy. Every addition also looks
// at a couple of entries, so that idle ones go without a goroutine of
// their own.
func (sh *leaseShard) track(key string, now int64, s *leasedStore) *leaseEntry {
	looked := 0
	for k, e := range sh.keys {
		full := len(sh.keys) >= s.perShard
		if e.idle(now, s.lease) || full && e.cold() {
			delete(sh.keys, k)
		}
		if looked++; looked >= 2 && len(sh.keys) < s.perShard || looked >= 64 {
			break
		}
	}
	if len(sh.keys) >= s.perShard {
		return nil
	}
	e := &leaseEntry{key: string([]byte(key)), since: now}
	sh.keys[e.key] = e
	return e
}

// cold reports whether the entry holds only a few recent units: nothing
// that dropping it would lose but its count.
func (e *leaseEntry) cold() bool {
	return e.pending == nil && e.share == nil && !e.hot()
}

// takeKey decides a take from the key's share when it holds one with
// room, rejects it while the key's last known state in the store does,
// and otherwise asks the store: for a hot key, a new share; for another,
// the take itself.
func (s *leasedStore) takeKey(ctx context.Context, key string, ls limits, cost int64) (Result, error) {
	if ls.upTo || cost <= 0 || cost > s.capacity {
		return s.guard.takeKey(ctx, key, ls, cost)
	}
	hash := maphash.String(s.seed, key)
	now := s.guard.now()
	units, before := s.heat.add(hash, now/s.lease, cost)
	if max(units, before) < hotUnits {
		return s.guard.takeKey(ctx, key, ls, cost)
	}
	sh := s.shardOf(hash)
	sh.mu.Lock()
	e := sh.keys[key]
	if e == nil {
		if e = sh.track(key, now, s); e == nil {
			sh.mu.Unlock() // the table is full of busy keys
			return s.guard.takeKey(ctx, key, ls, cost)
		}
		// Its own count from here: the sketch's counters may hold other
		// keys' units too, which must not size this key's share.
	}
	e.count(now, cost, s.lease)
	for {
		if v, ok := e.local(s.base.n, now, cost); ok {
			sh.mu.Unlock()
			return v, nil
		}
		if e.pending == nil {
			break
		}
		// Another take of this key is asking for a share: its answer may
		// serve this one too. A take whose request ends first goes to the
		// store (which answers an ended request as it does without leases).
		wait := e.pending
		sh.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return s.guard.takeKey(ctx, key, ls, cost)
		}
		sh.mu.Lock()
		now = s.guard.now()
		if e.failed {
			// The store did not answer it: this take goes to the store
			// too (and to the failure policy), in parallel rather than
			// one grant after another.
			sh.mu.Unlock()
			return s.guard.takeKey(ctx, key, ls, cost)
		}
	}
	if !e.hot() || now < e.directUntil || s.guard.breaker.open() {
		sh.mu.Unlock()
		return s.guard.takeKey(ctx, key, ls, cost)
	}
	want := e.want(cost, s.capacity, s.alg)
	if s.alg == TokenBucket && !e.deep(now, s) {
		sh.mu.Unlock()
		v, err := s.guard.takeKey(ctx, key, ls, cost)
		if err == nil && v.source == SourceBackend {
			sh.mu.Lock()
			e.told(&v, now)
			sh.mu.Unlock()
		}
		return v, err
	}
	return s.grant(ctx, sh, e, ls, cost, want, now)
}

// grant asks the store for a new share of e's key, of which the take of
// cost is the first use. sh is locked, and unlocked on return.
func (s *leasedStore) grant(ctx context.Context, sh *leaseShard, e *leaseEntry, ls limits, cost, want, now int64) (Result, error) {
	back := e.detach(s) // spent, ended, or too small for cost
	if back != nil && cost == 1 {
		s.returns.add(back, now)
		back = nil
	}
	done := make(chan struct{})
	e.pending = done
	penalties := e.penalties
	sh.mu.Unlock()

	if back != nil {
		// A take of several units that the share could not hold: what it
		// held goes back first, so that the grant can count it again (a
		// key's last units may be in it).
		s.giveBack(back)
	}
	ls.upTo = true
	// Not ended by the request's end: a share the store counted must be
	// kept, to be spent or given back (StorageTimeout still bounds it).
	v, err := s.guard.takeKey(context.WithoutCancel(ctx), e.key, ls, want)

	sh.mu.Lock()
	e.pending = nil
	e.failed = err != nil || v.source != SourceBackend && v.source != SourceDenyCache
	if e.failed {
		// The store may yet run the grant (a Redis that was slow, not
		// gone) and count a share nobody spends: the key is not leased
		// again for a lease, and its next share is small.
		e.directUntil = now + s.lease
		if e.share != nil {
			e.share.left = 0
		}
	}
	close(done)
	var res Result
	var decided bool
	if err == nil {
		res, decided = s.settle(e, &v, cost, now)
		if e.share != nil && e.penalties != penalties {
			e.share.id = 0 // a penalty came meanwhile: the share ends now
		}
	}
	sh.mu.Unlock()
	switch {
	case err != nil:
		return Result{}, err
	case decided:
		return res, nil
	case v.source != SourceBackend && v.source != SourceDenyCache:
		return s.answered(ctx, e.key, ls, cost, v), nil
	}
	// The store's to decide, with the wait of the take's cost: a grant's
	// rejection (or the deny cache's of it) is that of a single unit, and
	// a share too small for cost stays a share for smaller takes.
	ls.upTo = false
	return s.guard.takeKey(ctx, e.key, ls, cost)
}

// settle keeps the store's answer v to a grant sent at now for a take of
// cost, and decides the take from it where it can. The shard is locked.
func (s *leasedStore) settle(e *leaseEntry, v *Result, cost, now int64) (Result, bool) {
	switch {
	case v.source == SourceDenyCache && cost == 1:
		return *v, true
	case v.source != SourceBackend:
		return Result{}, false // the failure policy's, or a rejection of one unit
	}
	taken := v.granted
	v.granted = 0
	e.granted(v, taken, now, s)
	e.told(v, now)
	switch {
	case taken >= cost:
		e.share.used = cost
		return e.share.admitted(s.base.n, now), true
	case taken == 0 && cost == 1:
		return e.share.rejected(s.base.n, now), true
	}
	return Result{}, false
}

// answered turns the failure policy's answer v to a grant of want into
// the answer to a take of cost: FailFallback's limiter counted up to
// want, and gets back what the take does not use; when that is too
// little for cost, all of it, and it then decides the take itself.
func (s *leasedStore) answered(ctx context.Context, key string, ls limits, cost int64, v Result) Result {
	ls.upTo = false
	granted := v.granted
	v.granted = 0
	if v.source != SourceFallback || granted == cost || !v.Allowed() && cost == 1 {
		return v
	}
	credit := v
	credit.adjust = refundTaken
	if granted > cost {
		if after, err := s.guard.adjustKey(ctx, key, ls, granted-cost, credit); err == nil {
			for i := range v.n {
				v.each[i].Remaining = after.each[i].Remaining
			}
		}
		return v
	}
	if granted > 0 {
		_, _ = s.guard.adjustKey(ctx, key, ls, granted, credit)
	}
	v, _ = s.guard.fallback.take(ctx, key, &ls, cost)
	v.source = SourceFallback
	return v
}

// adjustKey refunds a take admitted from a share that is still out to the
// share itself; a window's other refunds, and every penalty, are the
// store's. A token bucket takes no refund (errLeasedBucketRefund), and no
// limiter with leases a reward (errLeasedReward).
func (s *leasedStore) adjustKey(ctx context.Context, key string, ls limits, cost int64, v Result) (Result, error) {
	switch v.adjust {
	case penalty:
		// This replica's share ends with the penalty, its unused units
		// left counted; other replicas' shares decide until their leases
		// end, within the limit still.
		sh := s.shard(key)
		sh.mu.Lock()
		if e := sh.keys[key]; e != nil {
			e.penalties++
			if e.share != nil {
				e.share.id = 0
			}
		}
		sh.mu.Unlock()
		return s.guard.adjustKey(ctx, key, ls, cost, v)
	case reward:
		return Result{}, errLeasedReward
	}
	if s.alg == TokenBucket {
		return Result{}, errLeasedBucketRefund
	}
	if v.source == SourceLease {
		sh := s.shard(key)
		sh.mu.Lock()
		if e := sh.keys[key]; e != nil && e.share != nil && e.share.id == v.lease && v.lease != 0 {
			e.share.used = max(0, e.share.used-cost)
			after := e.share.admitted(ls.n, s.guard.now())
			sh.mu.Unlock()
			return after, nil
		}
		sh.mu.Unlock()
		// Counted in the store, in the share's take, which has gone back
		// without these units.
		v.source = SourceBackend
	}
	return s.guard.adjustKey(ctx, key, ls, cost, v)
}

// errLeasedReward is the error of a reward on a limiter with leases: a
// reward gives back what the key has spent, whichever take counted it, and
// the store counts a share's units as spent from its grant on.
var errLeasedReward = errors.New("limiter: a limiter with Lease takes no Reward: the store cannot tell units spent from units that shares hold, which a reward would give back twice")

// errLeasedBucketRefund is the error of a refund on a token bucket with
// leases. A share of a bucket may be spent while the debt below it lasts
// (share.length), and a credit lowers that debt: a refund, or a share's
// unused units given back, could let a share out elsewhere spend units
// the bucket has already refilled. So a bucket's shares give nothing back
// either: their unused units refill.
var errLeasedBucketRefund = errors.New("limiter: a token bucket with Lease takes no refunds: a credit would lower the debt that other replicas' shares count on")
