package limiter

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyStorage is a fiber.Storage whose failures the test switches on and
// off: it stands for a store whose network fails. (Redis itself is failed
// for real in fault_test.go.) It counts the decisions it was asked for
// (its Gets).
type flakyStorage struct {
	*mapStorage
	mode    atomic.Int32 // storageUp, storageErr or storageHung
	gets    atomic.Int64
	release chan struct{} // closed to let hung calls go on
	once    sync.Once
}

const (
	storageUp = iota
	storageErr
	storageHung
)

var errStorageDown = errors.New("storage down")

func newFlakyStorage(t *testing.T) *flakyStorage {
	s := &flakyStorage{mapStorage: newMapStorage(), release: make(chan struct{})}
	t.Cleanup(s.unhang)
	return s
}

func (s *flakyStorage) unhang() { s.once.Do(func() { close(s.release) }) }

func (s *flakyStorage) fail() error {
	switch s.mode.Load() {
	case storageErr:
		return errStorageDown
	case storageHung:
		<-s.release
		return errStorageDown
	}
	return nil
}

func (s *flakyStorage) Get(key string) ([]byte, error) {
	s.gets.Add(1)
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.mapStorage.Get(key)
}

func (s *flakyStorage) Set(key string, val []byte, exp time.Duration) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.mapStorage.Set(key, val, exp)
}

// Each policy answers a request that the storage fails as documented:
// FailFallback with a local limiter of the same rule (Max admitted, then
// 429, with headers), FailOpen by admitting without headers, FailClosed
// with 503 and Retry-After. No storage error reaches the client.
func TestFailurePolicies(t *testing.T) {
	type want struct {
		code    int
		headers headers
	}
	tests := []struct {
		policy FailurePolicy
		want   []want // for 3 requests while the storage fails
	}{
		{FailFallback, []want{
			{200, headers{"2", "1", "10", ""}},
			{200, headers{"2", "0", "10", ""}},
			{429, headers{"2", "0", "10", "10"}},
		}},
		{FailOpen, []want{{200, headers{}}, {200, headers{}}, {200, headers{}}}},
		{FailClosed, []want{{503, headers{retryAfter: "2"}}, {503, headers{retryAfter: "2"}}, {503, headers{retryAfter: "2"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			store := newFlakyStorage(t)
			store.mode.Store(storageErr)
			app := newApp(Config{
				Max: 2, Expiration: 10 * time.Second, Storage: store, FailurePolicy: tt.policy,
				BreakerCooldown: 1500 * time.Millisecond,
			}, &testClock{}, nil)
			for i, w := range tt.want {
				resp := get(t, app, "/", "")
				assert.Equal(t, w.code, resp.StatusCode, "request %d", i)
				assert.Equal(t, w.headers, headersOf(resp), "request %d", i)
			}
		})
	}
}

// The breaker: after BreakerFailures failed calls in a row, requests stop
// reaching the storage; after BreakerCooldown one request probes it (a
// probe that the storage refuses at once is retried 50 ms later), and once
// a probe succeeds the shared count is used again.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	store := newFlakyStorage(t)
	clock := &testClock{}
	app := newApp(Config{
		Max: 100, Expiration: time.Hour, Storage: store,
		BreakerFailures: 3, BreakerCooldown: time.Second,
	}, clock, nil)
	send := func(n int) {
		for range n {
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
		}
	}

	send(2)
	require.Equal(t, int64(2), store.gets.Load())
	store.mode.Store(storageErr)
	send(10) // 3 failures open the breaker; the rest do not call
	assert.Equal(t, int64(5), store.gets.Load(), "3 failed calls, then none")

	clock.advance(999 * time.Millisecond)
	send(5)
	assert.Equal(t, int64(5), store.gets.Load(), "still cooling down")
	clock.advance(time.Millisecond)
	send(5)
	assert.Equal(t, int64(6), store.gets.Load(), "one probe after the cool-down")

	clock.advance(49 * time.Millisecond)
	send(5)
	assert.Equal(t, int64(6), store.gets.Load(), "a probe refused at once is retried 50 ms later, not sooner")
	clock.advance(time.Millisecond)
	send(5)
	assert.Equal(t, int64(7), store.gets.Load(), "the second probe")

	clock.advance(50 * time.Millisecond)
	store.mode.Store(storageUp)
	send(5)
	assert.Equal(t, int64(12), store.gets.Load(), "the probe succeeded: every request calls again")
	assert.Equal(t, "92", get(t, app, "/", "").Header.Get("X-RateLimit-Remaining"), "the shared count (8 taken), not the fallback's (30)")
}

// A storage call that hangs costs a request StorageTimeout, not more: the
// request goes to the policy at the deadline, and once the breaker is open
// requests no longer wait at all; a probe that times out waits a whole
// cool-down before the next.
func TestStorageTimeout(t *testing.T) {
	store := newFlakyStorage(t)
	store.mode.Store(storageHung)
	const timeout = 30 * time.Millisecond
	app := newApp(Config{Max: 10, Storage: store, StorageTimeout: timeout, BreakerFailures: 2}, nil, nil)
	for i := range 6 {
		start := time.Now()
		resp := get(t, app, "/", "")
		took := time.Since(start)
		require.Equal(t, 200, resp.StatusCode, "request %d: decided by the fallback", i)
		if i < 2 {
			assert.GreaterOrEqual(t, took, timeout, "request %d waited for the timeout", i)
			assert.Less(t, took, timeout+200*time.Millisecond, "request %d waited past the timeout", i)
		} else {
			assert.Less(t, took, timeout/2, "request %d: the breaker is open, no wait", i)
		}
	}
	// The second call waited behind the first's lock on the key, in this
	// process, and never reached Get.
	assert.Equal(t, int64(1), store.gets.Load())
	store.unhang() // the two calls left behind end; goleak checks they do
}

// OnStorageError gets the first failure at once, then at most one report a
// second, counting the failures in between; a failure that the breaker
// spares the storage is not one.
func TestStorageErrorReports(t *testing.T) {
	store := newFlakyStorage(t)
	store.mode.Store(storageErr)
	clock := &testClock{}
	var reports []*StorageError
	app := newApp(Config{
		Storage: store, BreakerFailures: 1 << 20,
		OnStorageError: func(err error) {
			var se *StorageError
			require.ErrorAs(t, err, &se)
			require.ErrorIs(t, err, errStorageDown)
			reports = append(reports, se)
		},
	}, clock, nil)
	for range 10 {
		get(t, app, "/", "")
	}
	require.Len(t, reports, 1)
	assert.Equal(t, 1, reports[0].Failures)
	assert.False(t, reports[0].BreakerOpen)
	clock.advance(999 * time.Millisecond)
	get(t, app, "/", "")
	require.Len(t, reports, 1, "within a second of the last report")
	clock.advance(time.Millisecond)
	get(t, app, "/", "")
	require.Len(t, reports, 2)
	assert.Equal(t, 11, reports[1].Failures, "the 11 failures since the first report")
	assert.Contains(t, reports[1].Error(), "limiter: 11 storage call(s) failed")
}

// A refund that fails does not change the response, and is reported.
func TestFailedRefundKeepsTheResponse(t *testing.T) {
	store := newFlakyStorage(t)
	var reported atomic.Int64
	app := newApp(Config{
		Storage: store, SkipSuccessfulRequests: true,
		OnStorageError: func(error) { reported.Add(1) },
	}, &testClock{}, func(c *fiber.Ctx) error {
		store.mode.Store(storageErr) // the storage fails between the take and the refund
		return c.SendString("ok")
	})
	resp := get(t, app, "/", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(1), reported.Load())
}

// The deny cache: once the storage rejects a key, the same request is
// rejected locally until its RetryAfter, with the storage's headers, and
// without a call; a smaller cost, another limit, a refund or the end of
// RetryAfter go to the storage again. Disabled, every request calls.
func TestDenyCache(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		t.Run(map[bool]string{false: "on", true: "off"}[disabled], func(t *testing.T) {
			store := newFlakyStorage(t)
			clock := &testClock{}
			cost := atomic.Int64{}
			cost.Store(1)
			limit := atomic.Int64{}
			limit.Store(3)
			app := newApp(Config{
				Storage: store, Expiration: 10 * time.Second, DisableDenyCache: disabled,
				MaxFunc: func(*fiber.Ctx) int { return int(limit.Load()) },
				Cost:    func(*fiber.Ctx) int { return int(cost.Load()) },
			}, clock, nil)
			cost.Store(2)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			stored := headersOf(resp)
			calls := store.gets.Load()

			for range 100 {
				resp := get(t, app, "/", "")
				require.Equal(t, 429, resp.StatusCode)
				require.Equal(t, stored, headersOf(resp))
			}
			if disabled {
				assert.Equal(t, calls+100, store.gets.Load())
				return
			}
			assert.Equal(t, calls, store.gets.Load(), "a rejected key costs the storage nothing")
			cost.Store(3)
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			assert.Equal(t, calls, store.gets.Load(), "a larger cost is rejected locally too")

			cost.Store(1)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode, "a smaller cost fits: the storage admits it")
			assert.Equal(t, calls+1, store.gets.Load())

			cost.Store(2)
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			calls = store.gets.Load()
			limit.Store(10)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode, "another limit goes to the storage")
			assert.Equal(t, calls+1, store.gets.Load())

			limit.Store(3)
			clock.advance(9999 * time.Millisecond)
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			calls = store.gets.Load()
			require.Equal(t, 429, get(t, app, "/", "").StatusCode)
			assert.Equal(t, calls, store.gets.Load())
			clock.advance(time.Millisecond)
			require.Equal(t, 200, get(t, app, "/", "").StatusCode, "RetryAfter has passed")
			assert.Equal(t, calls+1, store.gets.Load())
		})
	}
}

// After a probe fails, the next one comes a whole cool-down later when the
// probe timed out (it cost its request a wait), and 50 ms later when the
// store refused it at once.
func TestBreakerReprobeInterval(t *testing.T) {
	for _, tt := range []struct {
		name  string
		quick bool
		next  int64
	}{
		{"timed out", false, 1000},
		{"refused at once", true, 50},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreaker(1, 1000)
			b.failed(0, false, tt.quick)
			ok, probe := b.allow(999)
			require.False(t, ok)
			ok, probe = b.allow(1000)
			require.True(t, ok && probe)
			ok, _ = b.allow(1000)
			require.False(t, ok, "one probe at a time")
			b.failed(1000, true, tt.quick)
			ok, _ = b.allow(1000 + tt.next - 1)
			require.False(t, ok)
			ok, probe = b.allow(1000 + tt.next)
			require.True(t, ok && probe)
			b.succeeded(true)
			ok, probe = b.allow(1000 + tt.next)
			require.True(t, ok)
			require.False(t, probe, "closed")
		})
	}
}
