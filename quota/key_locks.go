package quota

import "sync"

// keyLocks serializes a Storage backend's calls on each key, and those
// only: a take waits for the one under way on its own key (a read, a
// decision and a write must not interleave), never for another key's
// round trip to the store. A waiter waits on the holder's channel, closed
// when the holder is done, so that it can give up when the guard stops
// waiting for it; the map holds one entry per key with a call under way,
// removed when that call is done, so it is as large as the calls out.
type keyLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock takes key's lock, or gives up when done is closed first and
// reports false.
func (k *keyLocks) lock(key string, done <-chan struct{}) bool {
	k.mu.Lock()
	for {
		holder, busy := k.held[key]
		if !busy {
			break
		}
		k.mu.Unlock()
		select {
		case <-holder:
		case <-done:
			return false
		}
		k.mu.Lock()
	}
	if k.held == nil {
		k.held = make(map[string]chan struct{})
	}
	k.held[key] = make(chan struct{})
	k.mu.Unlock()
	return true
}

// unlock releases key's lock, which the caller holds, and wakes its
// waiters.
func (k *keyLocks) unlock(key string) {
	k.mu.Lock()
	holder := k.held[key]
	delete(k.held, key)
	k.mu.Unlock()
	close(holder)
}
