package quota

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// markerKey keys the value a test puts in a request's context.
type markerKey struct{}

// storageCall is what a recording storage saw of one call.
type storageCall struct {
	op       string // "get" or "set"
	key      string
	marker   any           // the request's value, nil for none (or no context)
	deadline time.Duration // from the call to its context's deadline; 0 for none
	canceled bool          // the context had ended when the call began
	withCtx  bool          // through a context method
}

// recordingStorage is a Storage in a map in its plain form (Fiber v2's:
// Get, Set and Delete), recording each call. honour makes it answer a
// call whose context has ended with the context's error, as a store that
// stops work for a client that went away does.
type recordingStorage struct {
	mapStorage
	mu      sync.Mutex
	calls   []storageCall
	honour  bool
	onCall  func() // runs in every call, before it is answered; may be nil
	noPlain bool   // plain methods are a test failure (the context form must be used)
	t       *testing.T
}

func newRecordingStorage(t *testing.T) *recordingStorage {
	return &recordingStorage{mapStorage: mapStorage{m: map[string][]byte{}}, t: t}
}

// contextRecordingStorage is recordingStorage in Fiber v3's form: the
// context methods too.
type contextRecordingStorage struct{ *recordingStorage }

func newContextRecordingStorage(t *testing.T) contextRecordingStorage {
	s := newRecordingStorage(t)
	s.noPlain = true
	return contextRecordingStorage{s}
}

// record records a call; ctx is nil for one of the plain methods.
func (s *recordingStorage) record(ctx context.Context, op, key string) error {
	c := storageCall{op: op, key: key, withCtx: ctx != nil}
	if c.withCtx {
		c.marker = ctx.Value(markerKey{})
		if dl, ok := ctx.Deadline(); ok {
			c.deadline = time.Until(dl)
		}
		c.canceled = ctx.Err() != nil
	} else if s.noPlain {
		s.t.Errorf("plain %s called on a storage with the context methods", op)
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	if s.onCall != nil {
		s.onCall()
	}
	if c.withCtx && s.honour {
		return ctx.Err()
	}
	return nil
}

func (s *recordingStorage) recorded() []storageCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storageCall(nil), s.calls...)
}

// noContext stands for the context a plain method has not got.
var noContext context.Context

func (s *recordingStorage) Get(key string) ([]byte, error) {
	_ = s.record(noContext, "get", key)
	return s.mapStorage.Get(key)
}

func (s *recordingStorage) Set(key string, val []byte, exp time.Duration) error {
	_ = s.record(noContext, "set", key)
	return s.mapStorage.Set(key, val, exp)
}

func (s *recordingStorage) Delete(key string) error {
	s.t.Errorf("Delete(%q) called", key)
	return s.mapStorage.Delete(key)
}

func (s contextRecordingStorage) GetWithContext(ctx context.Context, key string) ([]byte, error) {
	if err := s.record(ctx, "get", key); err != nil {
		return nil, err
	}
	return s.mapStorage.Get(key)
}

func (s contextRecordingStorage) SetWithContext(ctx context.Context, key string, val []byte, exp time.Duration) error {
	if err := s.record(ctx, "set", key); err != nil {
		return err
	}
	return s.mapStorage.Set(key, val, exp)
}

func (s contextRecordingStorage) DeleteWithContext(_ context.Context, key string) error {
	s.t.Errorf("DeleteWithContext(%q) called", key)
	return s.mapStorage.Delete(key)
}

// A Storage with the context methods gets the request's context in every
// call, takes and adjustments alike, with its values and the StorageTimeout
// deadline; a Storage without them is called through Get and Set. Each
// take and each adjustment is one Get and one Set, a refund that leaves
// nothing held included (as Fiber's limiter makes them); one that finds
// nothing stored and leaves nothing is a Get alone; New calls nothing.
func TestStorageGetsRequestContext(t *testing.T) {
	const timeout = 2 * time.Second
	for _, form := range []string{"context methods", "plain"} {
		t.Run(form, func(t *testing.T) {
			var store Storage
			var rec *recordingStorage
			if form == "plain" {
				rec = newRecordingStorage(t)
				store = rec
			} else {
				s := newContextRecordingStorage(t)
				rec, store = s.recordingStorage, s
			}
			l, err := New(Config{Limits: []Limit{{Max: 5, Expiration: time.Minute}}, Storage: store, StorageTimeout: timeout, VaryMax: true})
			require.NoError(t, err)
			require.Empty(t, rec.recorded(), "New calls the storage")
			ctx := context.WithValue(context.Background(), markerKey{}, "request-1")

			steps := []struct {
				name string
				run  func() error
				ops  []string
			}{
				{"take", func() error {
					res, err := l.Take(ctx, "a", 1)
					if err == nil {
						_, err = l.Refund(ctx, "a", 1, &res)
					}
					return err
				}, []string{"get", "set", "get", "set"}},
				{"take with", func() error { _, err := l.TakeWith(ctx, "a", 1, Limit{Max: 3}); return err }, []string{"get", "set"}},
				{"idempotent", func() error {
					res, err := l.TakeIdempotent(ctx, "a", "id-1", 1)
					if err == nil {
						_, err = l.RefundIdempotent(ctx, "a", "id-1", 1, &res)
					}
					return err
				}, []string{"get", "set", "get", "set"}},
				{"penalty", func() error { _, err := l.Penalize(ctx, "a", 2); return err }, []string{"get", "set"}},
				{"reward", func() error { _, err := l.Reward(ctx, "a", 1); return err }, []string{"get", "set"}},
				{"reward of nothing spent", func() error { _, err := l.Reward(ctx, "fresh", 1); return err }, []string{"get"}},
			}
			for _, step := range steps {
				before := len(rec.recorded())
				require.NoError(t, step.run(), step.name)
				calls := rec.recorded()[before:]
				got := make([]string, len(calls))
				for i, c := range calls {
					got[i] = c.op
					if form == "plain" {
						assert.False(t, c.withCtx, "%s: %s", step.name, c.op)
						continue
					}
					assert.True(t, c.withCtx, "%s: %s", step.name, c.op)
					assert.Equal(t, "request-1", c.marker, "%s: %s: the request's value", step.name, c.op)
					assert.False(t, c.canceled, "%s: %s", step.name, c.op)
					assert.Greater(t, c.deadline, time.Duration(0), "%s: %s: no StorageTimeout deadline", step.name, c.op)
					assert.LessOrEqual(t, c.deadline, timeout, "%s: %s: a deadline past StorageTimeout", step.name, c.op)
				}
				assert.Equal(t, step.ops, got, step.name)
			}
		})
	}
}

// A request whose context has ended before the take still has its calls
// made, with that context: a store that ignores the cancellation decides
// it as usual (Fiber v3's own limiter tests ask the same).
func TestStorageCanceledRequestStillDecided(t *testing.T) {
	s := newContextRecordingStorage(t)
	l, err := New(Config{Limits: []Limit{{Max: 1, Expiration: time.Minute}}, Storage: s, FailurePolicy: FailOpen})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), markerKey{}, "gone"))
	cancel()

	res, err := l.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed())
	assert.Equal(t, SourceBackend, res.Source())
	res, err = l.Refund(ctx, "k", 1, &res)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Tightest().Remaining, "the refund was made")

	calls := s.recorded()
	require.Len(t, calls, 4)
	for _, c := range calls {
		assert.True(t, c.canceled, c.op)
		assert.Equal(t, "gone", c.marker, c.op)
	}
}

// A store that stops work for a request whose context ended (it returns
// ctx.Err()) ends the take with an error that wraps the context's: the
// client went away, which is no failure of the store's. However many such
// takes, the breaker stays closed and OnStorageError hears nothing, and
// FailOpen admits none of them; the next live request is decided by the
// store.
func TestStorageEndedRequestIsNoStoreFailure(t *testing.T) {
	for _, policy := range []FailurePolicy{FailOpen, FailClosed, FailFallback} {
		t.Run(policy.String(), func(t *testing.T) {
			s := newContextRecordingStorage(t)
			s.honour = true
			var reported atomic.Int64
			l, err := New(Config{
				Limits: []Limit{{Max: 100, Expiration: time.Minute}}, Storage: s, FailurePolicy: policy,
				BreakerFailures: 2, BreakerCooldown: time.Hour,
				OnStorageError: func(error) { reported.Add(1) },
			})
			require.NoError(t, err)

			canceled, cancel := context.WithCancel(context.Background())
			cancel()
			expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel2()
			for i := range 20 {
				ctx, want := canceled, context.Canceled
				if i >= 10 {
					ctx, want = expired, context.DeadlineExceeded // the application's own deadline
				}
				res, err := l.Take(ctx, "k", 1)
				require.ErrorIs(t, err, want, "take %d", i)
				assert.False(t, res.Allowed(), "take %d: admitted a request nobody decided", i)
				_, err = l.TakeIdempotent(ctx, "k", "id", 1)
				require.ErrorIs(t, err, want, "idempotent take %d", i)
				if i == 9 {
					assert.Zero(t, reported.Load(), "a client's going away reported as the store's failure")
				}
			}
			// A store slower than the application's deadline is seen, at
			// most once a second.
			assert.Positive(t, reported.Load(), "the application's deadline ended calls unseen")
			assert.LessOrEqual(t, reported.Load(), int64(3))

			before := len(s.recorded())
			res, err := l.Take(context.Background(), "k", 1)
			require.NoError(t, err)
			assert.Equal(t, SourceBackend, res.Source(), "the breaker opened")
			assert.True(t, res.Allowed())
			assert.Equal(t, 99, res.Tightest().Remaining, "an ended request was counted somewhere")
			assert.Len(t, s.recorded(), before+2)
		})
	}
}

// StorageTimeout stays the store's failure when the request is live: the
// failure policy answers (FailOpen admits), and the error hook hears it.
// Only the request's own end makes the take's error.
func TestStorageTimeoutStillFailurePolicy(t *testing.T) {
	s := newContextRecordingStorage(t)
	release := make(chan struct{})
	defer close(release)
	s.onCall = func() {
		select {
		case <-release:
		case <-time.After(time.Second):
		}
	}
	reported := make(chan error, 8)
	l, err := New(Config{
		Limits: []Limit{{Max: 100, Expiration: time.Minute}}, Storage: s, FailurePolicy: FailOpen,
		StorageTimeout: 20 * time.Millisecond,
		OnStorageError: func(err error) {
			select {
			case reported <- err:
			default:
			}
		},
	})
	require.NoError(t, err)
	res, err := l.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, SourceFailOpen, res.Source())
	select {
	case err := <-reported:
		assert.ErrorIs(t, err, ErrStorageTimeout)
	case <-time.After(5 * time.Second):
		t.Fatal("the timeout was not reported")
	}
}

// The Storage's errors name what failed, in the words of Fiber's limiter.
func TestStorageErrorTexts(t *testing.T) {
	for _, tc := range []struct {
		failing string
		want    []string
	}{
		{"get", []string{"limiter: failed to get key"}},
		{"set", []string{"limiter: failed to persist state", "limiter: failed to store key"}},
	} {
		t.Run(tc.failing, func(t *testing.T) {
			boom := errors.New("boom")
			b := newStorageBackend(failingOp{op: tc.failing, err: boom}, FixedWindow, "p:", wallMillis)
			ls := limitsOf(&Config{Limits: []Limit{{Max: 1, Expiration: time.Minute}}})
			_, err := b.take(context.Background(), "k", &ls, 1)
			require.ErrorIs(t, err, boom)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

// failingOp is a Storage whose op ("get" or "set") fails with err.
type failingOp struct {
	op  string
	err error
}

func (f failingOp) Get(string) ([]byte, error) {
	if f.op == "get" {
		return nil, f.err
	}
	return nil, nil
}

func (f failingOp) Set(string, []byte, time.Duration) error {
	if f.op == "set" {
		return f.err
	}
	return nil
}

func (f failingOp) Delete(string) error { return nil }
