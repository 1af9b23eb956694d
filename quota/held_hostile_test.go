package quota

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hostile tests of held takes (BlockFor, MinInterval) across replicas, and of
// request contexts that end on a Storage with the context methods.

// threeReplicas builds three limiters of cfg on one Redis, each with a
// client of its own.
func threeReplicas(t *testing.T, server *redistest.Server, cfg Config) []*Limiter {
	t.Helper()
	ls := make([]*Limiter, 3)
	for i := range ls {
		c := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		cfg.Redis = c
		cfg.FailurePolicy, cfg.StorageTimeout = FailClosed, 10*time.Second
		l, err := New(cfg)
		require.NoError(t, err)
		ls[i] = l
	}
	return ls
}

// Three replicas with BlockFor and MinInterval, one client that always
// retries exactly at RetryAfter on the next replica: never rejected twice
// in a row, and never more than Max admitted in a window.
func TestHostileRetryAtRetryAfterAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			now := newSettableNow()
			ls := threeReplicas(t, server, Config{
				Algorithm: alg, Limits: []Limit{{Max: 4, Expiration: time.Second}},
				BlockFor: 300 * time.Millisecond, MinInterval: 70 * time.Millisecond,
				Now: now.Now, Name: "rt29-" + alg.name(),
			})
			var admittedAt []int64
			rejectedBefore := false
			for i := range 300 {
				res, err := ls[i%3].Take(context.Background(), "k", 1)
				require.NoError(t, err)
				if res.Allowed() {
					admittedAt = append(admittedAt, now.ms.Load())
					rejectedBefore = false
					now.Add(10 * time.Millisecond) // a greedy client: again at once
					continue
				}
				require.False(t, rejectedBefore, "take %d: rejected again after waiting RetryAfter", i)
				require.NotEqual(t, Never, res.RetryAfter())
				rejectedBefore = true
				now.Add(res.RetryAfter())
			}
			// No window of a second holds more than Max, and no two
			// admissions are closer than MinInterval.
			for i := range admittedAt {
				if i > 0 {
					assert.GreaterOrEqual(t, admittedAt[i]-admittedAt[i-1], int64(70))
				}
				in := 0
				for _, at := range admittedAt[i:] {
					if at-admittedAt[i] < 1000 {
						in++
					}
				}
				if alg != TokenBucket && alg != SlidingWindow {
					assert.LessOrEqual(t, in, 4, "admitted in the second from %d", admittedAt[i])
				}
			}
			assert.Greater(t, len(admittedAt), 20)
		})
	}
}

// Many concurrent callers over three replicas at one instant, with
// BlockFor: exactly Max admitted; with MinInterval exactly one.
func TestHostileConcurrentHeldExact(t *testing.T) {
	server := redistest.Start(t)
	for _, tc := range []struct {
		name string
		gap  time.Duration
		want int
	}{{"block", 0, 7}, {"block and gap", time.Second, 1}} {
		for _, alg := range allAlgorithms {
			t.Run(tc.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				ls := threeReplicas(t, server, Config{
					Algorithm: alg, Limits: []Limit{{Max: 7, Expiration: time.Minute}},
					BlockFor: time.Minute, MinInterval: tc.gap, Now: now.Now,
					Name: "rt29c-" + alg.name() + tc.name[:5] + map[bool]string{true: "g"}[tc.gap > 0],
				})
				var ok atomic.Int64
				var wg sync.WaitGroup
				for g := range 30 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range 10 {
							res, err := ls[(g+i)%3].Take(context.Background(), "k", 1)
							assert.NoError(t, err)
							if res.Allowed() {
								ok.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				assert.Equal(t, int64(tc.want), ok.Load())
			})
		}
	}
}

// cancelStorage is a Storage with the context methods that honours the
// context: a call on an ended context fails with its error, and counts.
type cancelStorage struct {
	mapStorage
	calls atomic.Int64
}

func (s *cancelStorage) GetWithContext(ctx context.Context, key string) ([]byte, error) {
	s.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Get(key)
}

func (s *cancelStorage) SetWithContext(ctx context.Context, key string, val []byte, exp time.Duration) error {
	s.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Set(key, val, exp)
}

// A request whose context has ended is never admitted uncounted (under
// FailOpen least of all), leaves no lock held on its key, and many of
// them leave no goroutine behind.
func TestHostileCanceledRequestsOnContextStorage(t *testing.T) {
	for _, policy := range []FailurePolicy{FailOpen, FailFallback, FailError} {
		t.Run(policy.String(), func(t *testing.T) {
			store := &cancelStorage{mapStorage: mapStorage{m: map[string][]byte{}}}
			l, err := New(Config{
				Limits: []Limit{{Max: 3, Expiration: time.Hour}}, Storage: store, FailurePolicy: policy,
				StorageTimeout: 5 * time.Second, OnStorageError: func(error) {},
			})
			require.NoError(t, err)
			canceled, cancel := context.WithCancel(context.Background())
			cancel()
			before := runtime.NumGoroutine()
			var wg sync.WaitGroup
			var admitted atomic.Int64
			for range 500 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := l.Take(canceled, "k", 1)
					if err == nil && res.Allowed() {
						admitted.Add(1)
					}
					_, _ = l.Refund(canceled, "k", 1, &res)
				}()
			}
			wg.Wait()
			assert.Zero(t, admitted.Load(), "admitted with a canceled context")
			// The key is free and its whole quota is there: exactly Max.
			ok := 0
			start := time.Now()
			for range 6 {
				res, err := l.Take(context.Background(), "k", 1)
				require.NoError(t, err)
				if res.Allowed() {
					ok++
				}
			}
			assert.Equal(t, 3, ok)
			assert.Less(t, time.Since(start), 2*time.Second, "the key's lock was held")
			waitFor(t, "goroutines to settle", func() bool { return runtime.NumGoroutine() <= before+5 })
		})
	}
}

// An app deadline that ends while the call is under way: the request is
// never admitted uncounted (FailOpen), and a refund on an ended context
// never credits twice: the quota never exceeds Max.
func TestHostileDeadlineRaceNoOverAdmission(t *testing.T) {
	store := &cancelStorage{mapStorage: mapStorage{m: map[string][]byte{}}}
	l, err := New(Config{
		Limits: []Limit{{Max: 10, Expiration: time.Hour}}, Storage: store, FailurePolicy: FailOpen,
		StorageTimeout: 5 * time.Second, OnStorageError: func(error) {},
	})
	require.NoError(t, err)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%50)*time.Microsecond)
			defer cancel()
			res, err := l.Take(ctx, "k", 1)
			if err == nil && res.Allowed() {
				ok.Add(1)
				assert.Equal(t, SourceBackend, res.Source(), "admitted by the policy")
				if i%3 == 0 { // and some refund on the ended context
					if _, err := l.Refund(ctx, "k", 1, &res); err == nil {
						ok.Add(-1)
					}
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, ok.Load(), int64(10), "counted admissions")
	rest := 0
	for range 20 {
		res, err := l.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		if res.Allowed() {
			rest++
		}
	}
	assert.Equal(t, int64(10), ok.Load()+int64(rest), "admitted in all, refunds counted once")
}
