package limiter

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/gofiber/fiber/v2"
)

// storageBackend keeps state in any fiber.Storage by reading, deciding and
// writing back under a lock of this process. That is exact for one process;
// replicas sharing the store can interleave their reads and writes and admit
// more than the limit together, as Fiber's limiter does.
type storageBackend struct {
	store  fiber.Storage
	alg    algorithm
	prefix string // KeyPrefix + the algorithm's tag + ":"
	clock  func() int64
	seed   maphash.Seed
	// locks are striped by key, so unrelated keys do not wait. Each is a
	// channel of one slot, so that a call waiting behind a store call that
	// hangs gives up when its context ends instead of queuing for good.
	locks [64]chan struct{}
}

// stateVersion leads every stored value, so a later layout can be told apart.
const (
	stateVersion = 1
	stateSize    = 1 + 8 + 8 + 4 + 8
)

func newStorageBackend(store fiber.Storage, alg algorithm, prefix string, clock func() int64) *storageBackend {
	b := &storageBackend{store: store, alg: alg, prefix: prefix + alg.name() + ":", clock: clock, seed: maphash.MakeSeed()}
	for i := range b.locks {
		b.locks[i] = make(chan struct{}, 1)
	}
	return b
}

func (b *storageBackend) take(ctx context.Context, key string, r rule, cost int64) (Decision, error) {
	var d Decision
	err := b.modify(ctx, key, r, func(s state, now int64) (state, bool) {
		s, d = b.alg.take(s, now, r, cost)
		return s, d.Allowed
	})
	return d, err
}

func (b *storageBackend) refund(ctx context.Context, key string, r rule, cost int64, d Decision) error {
	return b.modify(ctx, key, r, func(s state, now int64) (state, bool) {
		return b.alg.refund(s, now, r, cost, d), true
	})
}

// probe reads a key nobody writes: a call that counts nothing.
func (b *storageBackend) probe(context.Context) error {
	_, err := b.store.Get(b.prefix + "probe")
	return err
}

// modify runs step on the key's state under the key's lock and writes the
// state back when step reports a change. It gives up when ctx ends while it
// waits for the lock, and does not write once ctx has ended: the caller has
// answered the request without this decision by then.
func (b *storageBackend) modify(ctx context.Context, key string, r rule, step func(s state, now int64) (state, bool)) error {
	skey := b.prefix + key
	lock := b.locks[maphash.String(b.seed, skey)%uint64(len(b.locks))]
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("limiter: storage: waiting for the key's lock: %w", ctx.Err())
	}
	defer func() { <-lock }()
	raw, err := b.store.Get(skey)
	if err != nil {
		return fmt.Errorf("limiter: storage get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("limiter: storage: %w", err)
	}
	now := b.clock()
	s := decodeState(raw, now)
	s, changed := step(s, now)
	if !changed {
		return nil
	}
	exp := b.alg.expiry(s, r)
	if exp <= now {
		if err := b.store.Delete(skey); err != nil {
			return fmt.Errorf("limiter: storage delete: %w", err)
		}
		return nil
	}
	// Stores differ in TTL resolution (Fiber's memory storage counts whole
	// seconds, rounding down). The state carries its own times, so keeping it
	// up to a second longer than needed changes nothing; losing it early would.
	ttl := time.Duration(ceilSeconds(millis(exp-now))+1) * time.Second
	if err := b.store.Set(skey, encodeState(s, exp), ttl); err != nil {
		return fmt.Errorf("limiter: storage set: %w", err)
	}
	return nil
}

// encodeState lays out a state with the time it expires: from then on it is
// empty, as the in-memory manager and the Redis scripts hold too.
func encodeState(s state, exp int64) []byte {
	buf := make([]byte, stateSize)
	buf[0] = stateVersion
	binary.BigEndian.PutUint64(buf[1:], uint64(s.a))
	binary.BigEndian.PutUint64(buf[9:], uint64(s.b))
	binary.BigEndian.PutUint32(buf[17:], s.c)
	binary.BigEndian.PutUint64(buf[21:], uint64(exp))
	return buf
}

// decodeState reads what encodeState wrote as it stands at now; anything
// else (nothing stored, another layout, an expired state) is a fresh state.
func decodeState(raw []byte, now int64) state {
	if len(raw) != stateSize || raw[0] != stateVersion || int64(binary.BigEndian.Uint64(raw[21:])) <= now {
		return state{}
	}
	return state{
		a: int64(binary.BigEndian.Uint64(raw[1:])),
		b: int64(binary.BigEndian.Uint64(raw[9:])),
		c: binary.BigEndian.Uint32(raw[17:]),
	}
}
