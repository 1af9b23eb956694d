package quota

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
)

// Storage is a key-value store that a Limiter may keep its state in:
// Fiber's storages (v2 and v3) have these methods. Get returns nil, nil
// for a missing key; Set keeps val for exp (0: for good). A take or an
// adjustment is one Get and, when it changes the key, one Set. A Storage
// that also has GetWithContext and SetWithContext (Fiber v3's, and some of
// v2's) is called through them, with the request's context: its values,
// its cancellation, and the StorageTimeout deadline.
type Storage interface {
	Get(key string) ([]byte, error)
	Set(key string, val []byte, exp time.Duration) error
	Delete(key string) error
}

// contextStorage is the Storage methods that take the request's context,
// as Fiber v3's Storage has them: a store that traces a request or stops
// work for a client that went away needs them. (Only Limiter.Reset deletes
// a key: see deleteWithContext.)
type contextStorage interface {
	GetWithContext(ctx context.Context, key string) ([]byte, error)
	SetWithContext(ctx context.Context, key string, val []byte, exp time.Duration) error
}

// storageBackend keeps state in any Storage by reading, deciding and
// writing back under a lock of this process. That is exact for one process;
// replicas sharing the store can interleave their reads and writes and admit
// more than the limit together, as Fiber's limiter does.
type storageBackend struct {
	store Storage
	// withContext is store when it has the context methods, which every
	// call then uses; else nil, and Get and Set see no context.
	withContext contextStorage
	alg         Algorithm
	prefix      string // the limiter's identity, see keyPrefix
	clock       func() int64
	// locks holds each key's lock while its call is under way: takes of
	// other keys do not wait for its round trip.
	locks keyLocks
}

// stateVersion leads every stored value, so a later layout can be told
// apart; the time the value expires follows, then each limit's state.
const (
	stateVersion   = 2
	stateHeadSize  = 1 + 8
	stateLimitSize = 8 + 8 + 4
)

func newStorageBackend(store Storage, alg Algorithm, prefix string, clock func() int64) *storageBackend {
	b := &storageBackend{store: store, alg: alg, prefix: prefix, clock: clock}
	b.withContext, _ = store.(contextStorage)
	return b
}

// take is the backend's take: a read, a decision and a write, under the
// key's lock.
func (b *storageBackend) take(ctx context.Context, key string, ls *limits, cost int64) (Result, error) {
	var v Result
	err := b.modify(ctx, key, ls, false, func(sts *[maxStates]state, lg *logs, now int64) bool {
		v = Result{}
		blocked := false
		switch {
		case ls.keyRules() || keyEnds{}.holding(sts[ls.n], now):
			blocked = b.alg.decideKeyInto(&v, sts, lg, now, ls, cost, 0)
		case ls.upTo:
			b.alg.decideUpToInto(&v, sts, lg, now, ls, cost)
		case ls.turn:
			b.alg.decideTurnInto(&v, sts, lg, now, ls, cost)
		default:
			b.alg.decideInto(&v, sts, lg, now, ls, cost)
		}
		if ls.upTo {
			cost = v.granted
		}
		if lg != nil && v.Allowed() && cost > 0 {
			lg.record(sts, ls, cost)
		}
		return v.Allowed() && cost > 0 || blocked
	})
	return v, err
}

// adjust is the backend's adjustment (a refund, a penalty or a reward),
// as take makes it.
func (b *storageBackend) adjust(ctx context.Context, key string, ls *limits, cost int64, v *Result) (Result, error) {
	var after Result
	err := b.modify(ctx, key, ls, true, func(sts *[maxStates]state, lg *logs, now int64) bool {
		after = b.alg.adjustAll(sts, lg, now, ls, cost, v)
		ls.clampEnds(sts, now)
		return true
	})
	return after, err
}

// probe reads a key nobody writes: a call that counts nothing.
func (b *storageBackend) probe(ctx context.Context) error {
	_, err := b.get(ctx, b.prefix+"probe")
	return err
}

// takesRequestContext tells within to give the calls the request's
// context, cancellation included (see requestScoped): the store sees it.
func (b *storageBackend) takesRequestContext() bool { return b.withContext != nil }

// get and set call the store, through its context methods when it
// has them.
func (b *storageBackend) get(ctx context.Context, key string) ([]byte, error) {
	if b.withContext != nil {
		return b.withContext.GetWithContext(ctx, key)
	}
	return b.store.Get(key)
}

func (b *storageBackend) set(ctx context.Context, key string, val []byte, exp time.Duration) error {
	if b.withContext != nil {
		return b.withContext.SetWithContext(ctx, key, val, exp)
	}
	return b.store.Set(key, val, exp)
}

// classify reads a Storage's error as the Redis backend reads go-redis's
// (redisFailure): a Storage may sit on go-redis (gofiber's Redis storage
// does), and the network errors it knows are any store's.
func (b *storageBackend) classify(err error) failureKind { return redisFailure(err) }

// modify runs step on the states of the key's limits under the key's lock
// and writes them back when step reports a change. It gives up when the
// guard stops waiting for it (StorageTimeout, see gaveUp) while it waits
// for the lock, and does not write once the guard has: the request has
// been answered without this decision by then. The request's own end
// (canceled, or past a deadline of the application's) stops nothing here:
// the store sees it in ctx and decides what it does with it.
// With keep (an adjustment), the value lasts at least as long as the one
// it replaces (see adjustAll).
func (b *storageBackend) modify(ctx context.Context, key string, ls *limits, keep bool, step func(sts *[maxStates]state, lg *logs, now int64) bool) error {
	skey := b.prefix + key
	waited := gaveUp(ctx)
	if !b.locks.lock(skey, waited.Done()) {
		return fmt.Errorf("limiter: storage: waiting for the key's lock: %w", waited.Err())
	}
	defer b.locks.unlock(skey)
	raw, err := b.get(ctx, skey)
	if err != nil {
		return fmt.Errorf("limiter: failed to get key's state: %w", err)
	}
	if err := waited.Err(); err != nil {
		return fmt.Errorf("limiter: storage: %w", err)
	}
	now := b.clock()
	var sts [maxStates]state
	var lg *logs
	if b.alg == SlidingLog {
		lg = newLogs(ls)
		decodeLogs(raw, now, ls, &sts, lg)
	} else {
		decodeStates(raw, now, ls.n, &sts)
	}
	if !step(&sts, lg, now) {
		return nil
	}
	kept := ls.stored(&sts, now)
	exp := b.alg.expiryAll(&sts, ls)
	if keep {
		exp = b.alg.keep(&sts, ls, exp, keptUntil(raw, now))
	}
	if exp <= now && raw == nil {
		return nil // nothing was stored, and nothing is left to store
	}
	// A state that holds nothing now (exp <= now: a refund of a window's
	// only take, say) is written as any other, and reads as nothing: a
	// change is one Set whatever it leaves, as with Fiber's limiter, and
	// overwrites whatever the key held.
	// Stores differ in TTL resolution (Fiber's memory storage counts whole
	// seconds, rounding down). The state carries its own times, so keeping it
	// up to a second longer than needed changes nothing; losing it early would.
	ttl := time.Duration(min(timestep.Seconds(millis(max(exp-now, 0)))+1, math.MaxInt64/int64(time.Second))) * time.Second
	val := encodeStates(&sts, kept, exp)
	if lg != nil {
		val = encodeLogs(val, &sts, lg, ls)
	}
	if err := b.set(ctx, skey, val, ttl); err != nil {
		return fmt.Errorf("limiter: failed to persist state: limiter: failed to store key's state: %w", err)
	}
	return nil
}

// encodeStates lays out the states of n limits with the time they expire:
// from then on they are empty, as the in-memory manager and the Redis
// scripts hold too.
func encodeStates(sts *[maxStates]state, n int, exp int64) []byte {
	buf := make([]byte, stateHeadSize+n*stateLimitSize)
	buf[0] = stateVersion
	binary.BigEndian.PutUint64(buf[1:], uint64(exp))
	for i, s := range sts[:n] {
		p := buf[stateHeadSize+i*stateLimitSize:]
		binary.BigEndian.PutUint64(p, uint64(s.a))
		binary.BigEndian.PutUint64(p[8:], uint64(s.b))
		binary.BigEndian.PutUint32(p[16:], s.c)
	}
	return buf
}

// keptUntil is when a value that encodeStates or encodeLogs wrote ends, if
// after now; else 0.
func keptUntil(raw []byte, now int64) int64 {
	if len(raw) < stateHeadSize || raw[0] != stateVersion && raw[0] != logVersion {
		return 0
	}
	if exp := int64(binary.BigEndian.Uint64(raw[1:])); exp > now {
		return exp
	}
	return 0
}

// decodeStates reads what encodeStates wrote for n limits, with or
// without the state of the key's rules after theirs (see limits.stored),
// as it stands at now into sts; anything else (nothing stored, another
// layout or count of limits, an expired value) leaves sts fresh.
func decodeStates(raw []byte, now int64, n int, sts *[maxStates]state) {
	if len(raw) == stateHeadSize+(n+1)*stateLimitSize {
		n++
	}
	if len(raw) != stateHeadSize+n*stateLimitSize || raw[0] != stateVersion || int64(binary.BigEndian.Uint64(raw[1:])) <= now {
		return
	}
	for i := range n {
		p := raw[stateHeadSize+i*stateLimitSize:]
		sts[i] = state{
			a: int64(binary.BigEndian.Uint64(p)),
			b: int64(binary.BigEndian.Uint64(p[8:])),
			c: binary.BigEndian.Uint32(p[16:]),
		}
	}
}

// logValueSize is the length of a SlidingLog value of the logs of limits
// limits after states states (limits, or one more with the key's rules')
// as raw holds them, or -1 when they are not there.
func logValueSize(raw []byte, states, limits int) int {
	size := int64(stateHeadSize + states*stateLimitSize)
	if int64(len(raw)) < size {
		return -1
	}
	for i := range limits {
		b := int64(binary.BigEndian.Uint64(raw[stateHeadSize+i*stateLimitSize+8:]))
		if b < 0 || b > MaxLogLimit {
			return -1
		}
		size += 8 * b
	}
	return int(size)
}

// logVersion leads a SlidingLog value: encodeStates's layout, then each
// limit's entries, oldest first (8 bytes each).
const logVersion = 3

// newLogs returns empty rings for the logs of ls.
func newLogs(ls *limits) *logs {
	lg := new(logs)
	for i := range ls.n {
		lg.ring[i] = make([]int64, ls.r[i].max)
	}
	return lg
}

// encodeLogs appends the entries of lg to buf, encodeStates's value of
// sts, and marks it as a log's.
func encodeLogs(buf []byte, sts *[maxStates]state, lg *logs, ls *limits) []byte {
	buf[0] = logVersion
	for i := range ls.n {
		s := sts[i]
		for k := range s.b {
			buf = binary.BigEndian.AppendUint64(buf, uint64(logAt(lg.ring[i], int64(s.c), k)))
		}
	}
	return buf
}

// decodeLogs reads what encodeLogs wrote into sts and lg as decodeStates
// does; each log keeps at most its limit's newest entries, in its ring
// from index 0. Anything else (entries out of time order, or after the
// newest the state names) leaves them fresh.
func decodeLogs(raw []byte, now int64, ls *limits, sts *[maxStates]state, lg *logs) {
	if len(raw) < stateHeadSize || raw[0] != logVersion || int64(binary.BigEndian.Uint64(raw[1:])) <= now {
		return
	}
	// With or without the state of the key's rules after the limits' (see
	// limits.stored): the one whose entries fill the value.
	n := ls.n
	if len(raw) != logValueSize(raw, n, ls.n) {
		n++
	}
	head := stateHeadSize + n*stateLimitSize
	if len(raw) != logValueSize(raw, n, ls.n) {
		return
	}
	var read [maxStates]state
	entries := 0
	for i := range n {
		p := raw[stateHeadSize+i*stateLimitSize:]
		read[i] = state{a: int64(binary.BigEndian.Uint64(p)), b: int64(binary.BigEndian.Uint64(p[8:])), c: binary.BigEndian.Uint32(p[16:])}
		if i < ls.n {
			if read[i].b < 0 || read[i].b > MaxLogLimit {
				return
			}
			entries += int(read[i].b)
		}
	}
	if len(raw) != head+8*entries {
		return
	}
	p := raw[head:]
	for i := range ls.n {
		s, ring := read[i], lg.ring[i]
		skip := max(0, s.b-int64(len(ring)))
		prev := int64(math.MinInt64)
		for k := range s.b {
			// In time order, none after the newest (a): else not a log of
			// ours, and no state.
			t := int64(binary.BigEndian.Uint64(p[8*k:]))
			if t < prev || t > s.a {
				return
			}
			prev = t
			if k >= skip {
				ring[k-skip] = t
			}
		}
		p = p[8*s.b:]
		read[i] = state{}
		if kept := s.b - skip; kept > 0 {
			read[i] = state{a: ring[kept-1], b: kept}
		}
	}
	*sts = read
}

// peek reads key as a take of 1 would find it, counting nothing (see
// Limiter.Peek), and writes nothing.
func (b *storageBackend) peek(ctx context.Context, key string, ls *limits) (Result, int64, error) {
	var v Result
	var held int64
	err := b.modify(ctx, key, ls, false, func(sts *[maxStates]state, lg *logs, now int64) bool {
		v = Result{}
		held = b.alg.peekInto(&v, sts, lg, now, ls, 0)
		return false
	})
	return v, held, err
}

// block holds key off for d ms (see Limiter.Block), its counts kept, and
// then reads it as peek does.
func (b *storageBackend) block(ctx context.Context, key string, ls *limits, d int64) (Result, int64, error) {
	var v Result
	var held int64
	err := b.modify(ctx, key, ls, false, func(sts *[maxStates]state, lg *logs, now int64) bool {
		_, gapEnd, _ := keyEnds{}.read(sts[ls.n], now)
		sts[ls.n] = keyEnds{}.state(0, gapEnd, ls.holdUntil(sts[ls.n], now, d), now)
		v = Result{}
		held = b.alg.peekInto(&v, sts, lg, now, ls, 0)
		return true
	})
	return v, held, err
}

// reset deletes key's state (see Limiter.Reset), under its lock.
func (b *storageBackend) reset(ctx context.Context, key string) error {
	skey := b.prefix + key
	waited := gaveUp(ctx)
	if !b.locks.lock(skey, waited.Done()) {
		return fmt.Errorf("limiter: storage: waiting for the key's lock: %w", waited.Err())
	}
	defer b.locks.unlock(skey)
	del := b.store.Delete
	if d, ok := b.store.(deleteWithContext); ok {
		del = func(key string) error { return d.DeleteWithContext(ctx, key) }
	}
	if err := del(skey); err != nil {
		return fmt.Errorf("limiter: storage: delete: %w", err)
	}
	return nil
}

// deleteWithContext is Fiber v3's Delete with the caller's context, which
// Reset calls when the Storage has it.
type deleteWithContext interface {
	DeleteWithContext(ctx context.Context, key string) error
}
