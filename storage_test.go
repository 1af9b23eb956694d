package limiter

// A fiber.Storage of plain Get and Set (mapStorage) as the limiter's backend.

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// mapStorage is a minimal fiber.Storage, standing for any third-party store.
type mapStorage struct {
	mu   sync.Mutex
	data map[string][]byte
	ttl  map[string]time.Duration
}

func newMapStorage() *mapStorage {
	return &mapStorage{data: map[string][]byte{}, ttl: map[string]time.Duration{}}
}

func (s *mapStorage) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[key], nil
}

func (s *mapStorage) Set(key string, val []byte, exp time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[key] = append([]byte(nil), val...)
	s.ttl[key] = exp
	return nil
}

func (s *mapStorage) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.data, key)
	return nil
}

func (s *mapStorage) Reset() error { return nil }
func (s *mapStorage) Close() error { return nil }

func TestFiberStorageBackend(t *testing.T) {
	tests := []struct {
		mw      LimiterHandler
		wantKey string
		wantTTL time.Duration // the state's life rounded up, plus a second
	}{
		{FixedWindow{}, "limiter::fw:10s:0.0.0.0", 11 * time.Second},
		{SlidingWindow{}, "limiter::sw:10s:0.0.0.0", 21 * time.Second},
		{TokenBucket{}, "limiter::tb:10s:0.0.0.0", 11 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fiberName(tt.mw), func(t *testing.T) {
			store := newMapStorage()
			clock := &testClock{}
			app := newApp(Config{Max: 2, Expiration: 10 * time.Second, Storage: store, LimiterMiddleware: tt.mw}, clock, nil)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			require.Len(t, store.data, 1)
			require.Equal(t, map[string]time.Duration{tt.wantKey: tt.wantTTL}, store.ttl)
			clock.advance(20 * time.Second)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
		})
	}
}
