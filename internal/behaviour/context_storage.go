package behaviour

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequestMark keys the value a test's middleware puts in the request's
// context, for ContextStorage to find in its calls.
type RequestMark struct{}

// Visit is what ContextStorage saw of one call.
type Visit struct {
	Op, Key  string
	Mark     any
	Canceled bool
	Deadline bool
}

// ContextStorage is a fiber.Storage (v2 or v3) in a map, with the context
// methods of Fiber v3's Storage (some v2 storages have them), that records
// the context of every call; its plain methods fail the test, since a
// Storage with the context methods is called through them.
type ContextStorage struct {
	t      *testing.T
	mu     sync.Mutex
	data   map[string][]byte
	visits []Visit
}

// NewContextStorage returns an empty ContextStorage failing t.
func NewContextStorage(t *testing.T) *ContextStorage {
	return &ContextStorage{t: t, data: map[string][]byte{}}
}

// Visits returns the calls on keys that end with suffix, in order.
func (s *ContextStorage) Visits(suffix string) []Visit {
	s.mu.Lock()
	defer s.mu.Unlock()
	var vs []Visit
	for _, v := range s.visits {
		if strings.HasSuffix(v.Key, suffix) {
			vs = append(vs, v)
		}
	}
	return vs
}

func (s *ContextStorage) visit(ctx context.Context, op, key string) {
	_, deadline := ctx.Deadline()
	s.visits = append(s.visits, Visit{Op: op, Key: key, Mark: ctx.Value(RequestMark{}), Canceled: ctx.Err() != nil, Deadline: deadline})
}

// GetWithContext is Fiber v3's Get with a context.
func (s *ContextStorage) GetWithContext(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.visit(ctx, "get", key)
	return s.data[key], nil
}

// SetWithContext is Fiber v3's Set with a context.
func (s *ContextStorage) SetWithContext(ctx context.Context, key string, val []byte, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.visit(ctx, "set", key)
	s.data[key] = append([]byte(nil), val...)
	return nil
}

// DeleteWithContext is Fiber v3's Delete with a context.
func (s *ContextStorage) DeleteWithContext(_ context.Context, key string) error { return s.Delete(key) }

// ResetWithContext is Fiber v3's Reset with a context.
func (s *ContextStorage) ResetWithContext(context.Context) error { return s.Reset() }

// Get fails the test: the limiter must call GetWithContext.
func (s *ContextStorage) Get(key string) ([]byte, error) {
	s.t.Errorf("Get(%q) called", key)
	return nil, nil
}

// Set fails the test: the limiter must call SetWithContext.
func (s *ContextStorage) Set(key string, _ []byte, _ time.Duration) error {
	s.t.Errorf("Set(%q) called", key)
	return nil
}

// Delete fails the test: the limiter deletes nothing.
func (s *ContextStorage) Delete(key string) error {
	s.t.Errorf("Delete(%q) called", key)
	return nil
}

// Reset fails the test: the limiter resets nothing.
func (s *ContextStorage) Reset() error { s.t.Error("Reset called"); return nil }

// Close closes nothing.
func (*ContextStorage) Close() error { return nil }

// CheckVisits asserts that the calls on each path's key carried that
// request's mark, its cancellation (for "/canceled" only) and a deadline,
// and were a Get and a Set for the take and a Get and a Set for the
// refund.
func (s *ContextStorage) CheckVisits(t *testing.T, paths ...string) {
	t.Helper()
	for _, path := range paths {
		var ops []string
		for _, v := range s.Visits(path) {
			ops = append(ops, v.Op)
			if v.Mark != path {
				t.Errorf("%s %s: mark %v, not the request's", path, v.Op, v.Mark)
			}
			if v.Canceled != (path == "/canceled") {
				t.Errorf("%s %s: canceled %v", path, v.Op, v.Canceled)
			}
			if !v.Deadline {
				t.Errorf("%s %s: no StorageTimeout deadline", path, v.Op)
			}
		}
		if strings.Join(ops, " ") != "get set get set" {
			t.Errorf("%s: calls %v, want get set get set", path, ops)
		}
	}
}
