package quota

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowStorage is a Storage in a map whose every call takes delay, as a
// store across a network does.
type slowStorage struct {
	mapStorage
	delay time.Duration
}

func (s *slowStorage) Get(key string) ([]byte, error) {
	time.Sleep(s.delay)
	return s.mapStorage.Get(key)
}

func (s *slowStorage) Set(key string, val []byte, exp time.Duration) error {
	time.Sleep(s.delay)
	return s.mapStorage.Set(key, val, exp)
}

// Idempotent takes of different requests do not wait for each other's
// round trip to a Storage, even when their records share a shard of the
// cache: 32 at once, each a Get and a Set of 10 ms, take about 20 ms
// together, not 32 times that. Takes of one request at
// once still wait for each other, and count once.
func TestIdempotentTakesWaitPerRequest(t *testing.T) {
	const delay = 10 * time.Millisecond
	store := &slowStorage{mapStorage: mapStorage{m: map[string][]byte{}}, delay: delay}
	l, err := New(Config{Limits: []Limit{{Max: 100, Expiration: time.Minute}}, Storage: store, StorageTimeout: 5 * time.Second})
	require.NoError(t, err)
	ctx := context.Background()

	t.Run("different requests", func(t *testing.T) {
		// Requests whose records fall in one shard of the cache, each of
		// its own key.
		const n = 32
		var ids []string
		for i := 0; len(ids) < n; i++ {
			if id := strconv.Itoa(i); requestIDOf("key-"+id, id)[0]%idempotencyShards == 0 {
				ids = append(ids, id)
			}
		}
		var wg sync.WaitGroup
		start := time.Now()
		for _, id := range ids {
			wg.Go(func() {
				res, err := l.TakeIdempotent(ctx, "key-"+id, id, 1)
				assert.NoError(t, err)
				assert.Equal(t, SourceBackend, res.Source())
			})
		}
		wg.Wait()
		took := time.Since(start)
		// One take alone is 2 x delay; 32 in a row, 640 ms. The bound
		// leaves room for a loaded 2-core machine.
		assert.Less(t, took, 160*time.Millisecond, "%d takes of different requests waited for each other", n)
	})

	t.Run("one request", func(t *testing.T) {
		const n = 8
		results := make([]Result, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var err error
				results[i], err = l.TakeIdempotent(ctx, "shared", "same-id", 1)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		counted := 0
		for _, res := range results {
			assert.True(t, res.Allowed())
			if res.Source() == SourceBackend {
				counted++
			} else {
				assert.Equal(t, SourceRepeat, res.Source())
			}
		}
		assert.Equal(t, 1, counted, "one request counted more than once")
		res, err := l.Take(ctx, "shared", 0)
		require.NoError(t, err)
		assert.Equal(t, 99, res.Tightest().Remaining, "the store counted the request more than once")
	})
}

// The requests in flight are forgotten once their takes are done, a
// take that panics included: the map of busy requests does not grow.
func TestIdempotentBusyRequestsForgotten(t *testing.T) {
	c := newIdempotencyCache(time.Hour, 64, wallMillis)
	admit := func() Result { return Result{n: 1, each: [maxLimits]Decision{{Allowed: true}}} }
	for i := range 1000 {
		c.take(requestIDOf("k", strconv.Itoa(i)), 1, admit)
	}
	r := requestIDOf("k", "panics")
	assert.Panics(t, func() { c.take(r, 1, func() Result { panic("store bug") }) })
	v := c.take(r, 1, admit) // not left waiting for the take that panicked
	assert.True(t, v.Allowed())
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		assert.Empty(t, s.busy, "shard %d", i)
		s.mu.Unlock()
	}
}
