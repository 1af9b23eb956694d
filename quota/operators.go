package quota

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
)

// Operators' controls: Peek, Reset and Block a key, for an admin endpoint
// ("why is this customer limited?", "unblock them", "hold this abuser off
// for an hour").
//
// On Redis each is one call, exact across replicas: Peek and Block one
// script call, Reset a DEL of the key's one value. What a replica keeps
// of a key besides the store (its deny cache, and with Lease its share)
// lasts at most operatorReach, so that a Reset or a Block made on one
// replica holds on every replica within a second; the replica that makes
// it drops its own at once.

// operatorReach (ms) bounds how long a replica answers a key from what it
// keeps of it: a rejection in the deny cache, a lease's share. A tenth of
// the second is left for the calls' round trips and a busy machine.
const operatorReach = 900

// Status is a key's state under a Limiter, as Peek finds it: what a take
// of cost 1 would meet now, with nothing counted.
type Status struct {
	// Result holds each limit's Decision (Decisions, Tightest): its
	// Remaining, ResetAfter (until its quota is fully back) and RetryAfter
	// (until a take of 1 would be admitted: 0 when it would be now, Held
	// included). Allowed reports whether that take would be admitted now,
	// under every limit: each Decision's Allowed says the same; a limit of
	// its own would admit it when its RetryAfter is 0.
	Result
	// Held is how long the key is held off whatever its counts: by
	// Block, by BlockFor after a rejection, or by MinInterval since its
	// last admitted take; 0 when nothing holds it.
	Held time.Duration
}

// Blocked reports whether something holds the key off whatever its
// counts (Held > 0).
func (s Status) Blocked() bool { return s.Held > 0 }

// Peek returns key's state under every limit as a take of cost 1 would
// find it now, and counts nothing: it is answered by the store (Redis, a
// Storage or memory), past the deny cache and any lease, and changes
// nothing there. When the store fails, the error says so (FailurePolicy
// answers takes, not operators).
func (l *Limiter) Peek(ctx context.Context, key string) (Status, error) {
	if err := l.checkOperator("Peek", key); err != nil {
		return Status{}, err
	}
	if l.memory != nil {
		v, held := l.memory.peek(ctx, key, &l.base)
		return l.status(v, held), nil
	}
	v, held, err := l.guard.peek(ctx, key, &l.base)
	if err != nil {
		return Status{}, err
	}
	return l.status(v, held), nil
}

// Reset forgets key's counts under every limit, and its block (Block's
// and BlockFor's) and gap (MinInterval's): its next take finds none. A
// take of key made before the Reset and refunded after it may give its
// units back to the counts made since (up to what the takes in flight at
// the Reset took), and with Lease, what other replicas' shares held at the
// Reset is spent or given back over the next 900 ms in the same way. On
// Redis it holds on every replica within a second.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := l.checkOperator("Reset", key); err != nil {
		return err
	}
	if l.memory != nil {
		l.memory.reset(ctx, key)
		return nil
	}
	err := l.guard.reset(ctx, key)
	if l.leases != nil {
		l.leases.drop(key, false)
	}
	return err
}

// Block holds key off for d (above 0, at most 365 days; whole ms) whatever
// its counts: every take of it is rejected with Remaining 0 and a
// RetryAfter of at least the rest of d, under this limiter's every limit,
// until d has passed (or a BlockFor block that ends later has) or Reset
// lifts it; a later Block replaces it. It counts nothing, keeps the counts,
// and returns the state it leaves, as Peek would. On Redis it holds on
// every replica within a second: replicas of a release without Block
// ignore the hold and keep it for the others, but one with BlockFor cuts it
// to its BlockFor (Block again once the deploy is done). While the store is
// out of reach, FailurePolicy answers takes without it. In memory it keeps
// at most MaxKeys holds at once: beyond, Block returns an error.
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) (Status, error) {
	if err := l.checkOperator("Block", key); err != nil {
		return Status{}, err
	}
	if d <= 0 || d > maxBlock {
		return Status{}, fmt.Errorf("limiter: Block: d is %v; it must be above 0 and at most %v (Reset lifts a block)", d, maxBlock)
	}
	ms := ceilDiv(int64(d), int64(time.Millisecond))
	if l.memory != nil {
		v, held, err := l.memory.block(ctx, key, &l.base, ms)
		if err != nil {
			return Status{}, err
		}
		return l.status(v, held), nil
	}
	v, held, err := l.guard.block(ctx, key, &l.base, ms)
	if l.leases != nil {
		l.leases.drop(key, true)
	}
	if err != nil {
		return Status{}, err
	}
	return l.status(v, held), nil
}

// checkOperator checks an operator's call (name) on key.
func (l *Limiter) checkOperator(name, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("limiter: %s: the key is empty", name)
	case l.varyExpiration:
		return fmt.Errorf("limiter: %s: a limiter with VaryExpiration (ExpirationFunc) keeps a key's state under each window it was taken with, which %s cannot name", name, name)
	}
	return nil
}

// status is the Status of v, a peek's Result, with held ms.
func (l *Limiter) status(v Result, held int64) Status {
	v.source = SourceBackend
	l.finish(&v, &l.base)
	return Status{Result: v, Held: millis(held)}
}

// opened is a key an operator's call holds in the manager: its shard,
// locked, and its states at now (none without a live entry).
type opened struct {
	buf [sha256.Size]byte // k's bytes when the key is kept as a digest
	s   *shard
	k   string
	i   int // its entry, or -1
	now int64
	sts [maxStates]state
	lg  *logs
}

// open locks key's shard into o and reads the key's states under ls (nil:
// none read); the caller unlocks o.s.
func (m *manager) open(ctx context.Context, key string, ls *limits, o *opened) {
	var klen uint32
	o.k, klen = entryKey(key, &o.buf)
	var h uint64
	o.s, h = m.shardFor(o.k)
	o.now = m.now(ctx)
	o.s.mu.Lock()
	o.i = o.s.find(o.k, klen, uint32(h))
	if ls != nil && o.i >= 0 && o.s.entries[o.i].exp > o.now {
		o.s.load(o.i, &o.sts)
		if o.s.logStride > 0 {
			o.lg = o.s.rings(o.i, ls, new(logs))
		}
	}
}

// peek reads key as a take of 1 would find it, counting nothing (see
// Limiter.Peek).
func (m *manager) peek(ctx context.Context, key string, ls *limits) (Result, int64) {
	var o opened
	m.open(ctx, key, ls, &o)
	defer o.s.mu.Unlock()
	var v Result
	held := m.alg.peekInto(&v, &o.sts, o.lg, o.now, ls, o.s.holds.end(o.k, o.now))
	return v, held
}

// reset forgets key (see Limiter.Reset): its entry ends now, and its hold.
func (m *manager) reset(ctx context.Context, key string) {
	var o opened
	m.open(ctx, key, nil, &o)
	defer o.s.mu.Unlock()
	if o.i >= 0 {
		var none [maxStates]state
		o.s.store(o.i, &none, min(o.now, o.s.entries[o.i].exp))
	}
	o.s.holds.drop(o.k)
}

// block holds key off for d ms (see Limiter.Block) and reads it as peek
// does; an error when MaxKeys holds are kept already.
func (m *manager) block(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error) {
	var o opened
	m.open(ctx, key, ls, &o)
	defer o.s.mu.Unlock()
	s := o.s
	end := ls.holdUntil(o.sts[ls.n], o.now, d)
	if !s.holds.set(strings.Clone(o.k), end, o.now, s.limit) {
		return Result{}, 0, fmt.Errorf("limiter: Block: as many keys are blocked already as MaxKeys allows (%d in this key's shard of %d)", s.limit, shardCount)
	}
	if ls.keyRules() && o.i >= 0 && o.sts[ls.n] != (state{}) {
		// The hold takes the place of the block (which it outlasts) and of
		// the gap, as in the stores, where it is both ends.
		o.sts[ls.n] = state{}
		s.store(o.i, &o.sts, s.entries[o.i].exp)
	}
	var v Result
	held := m.alg.peekInto(&v, &o.sts, o.lg, o.now, ls, end)
	return v, held, nil
}

// peek, block and reset are the guarded store's operators' calls: within
// the call timeout, whatever the breaker says (an operator wants the
// store's answer), and apart from it (an admin endpoint's failing calls
// do not open it for the traffic). Block and reset drop the key's
// rejection from the deny cache.
func (g *guardedStore) peek(ctx context.Context, key string, ls *limits) (Result, int64, error) {
	a, err := within(ctx, g, key, func(ctx context.Context, key string) (opAnswer, error) {
		v, held, err := g.store.peek(ctx, key, ls)
		return opAnswer{v, held}, err
	})
	return a.v, a.held, err
}

func (g *guardedStore) block(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error) {
	a, err := within(ctx, g, key, func(ctx context.Context, key string) (opAnswer, error) {
		v, held, err := g.store.block(ctx, key, ls, d)
		return opAnswer{v, held}, err
	})
	if g.deny != nil {
		g.deny.forget(key)
	}
	return a.v, a.held, err
}

func (g *guardedStore) reset(ctx context.Context, key string) error {
	_, err := within(ctx, g, key, func(ctx context.Context, key string) (struct{}, error) {
		return struct{}{}, g.store.reset(ctx, key)
	})
	if g.deny != nil {
		g.deny.forget(key)
	}
	return err
}

// opAnswer is a peek's or a block's answer through call.
type opAnswer struct {
	v    Result
	held int64
}

// drop ends key's share on this replica (Limiter.Reset and Block), and
// any share a grant under way brings: the key is decided in the store
// again. After a Block, what the share did not spend goes back; after a
// Reset, nothing does (the counts it was taken from are gone).
func (s *leasedStore) drop(key string, giveBack bool) {
	sh := s.shard(key)
	sh.mu.Lock()
	e := sh.keys[key]
	var back *leaseReturn
	if e != nil {
		e.penalties++ // a grant under way brings a share ended at once
		back = e.detach(s)
		if e.share != nil {
			e.share.deniedUntil = 0
		}
	}
	sh.mu.Unlock()
	if back != nil && giveBack {
		s.giveBack(back)
	}
}
