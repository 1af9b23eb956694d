package limiter

// A fiber.Storage that fails on demand (flakyStorage): the policies, breaker, timeout and reports.

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
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
// for real in redis_outage_test.go and redis_misconfigured_test.go.) It counts the decisions it was asked for
// (its Gets).
type flakyStorage struct {
	*mapStorage
	mode    atomic.Int32 // storageUp, storageErr, storageHung or storagePanic
	badKey  string       // a key the storage rejects at once, as a SQL column too short for it would
	gets    atomic.Int64
	gotten  atomic.Int64  // Gets that returned
	hangKey string        // a key whose calls hang, whatever the mode, until unhang
	release chan struct{} // closed to let hung calls go on
	once    sync.Once
}

const (
	storageUp = iota
	storageErr
	storageHung
	storagePanic
)

var errStorageDown = errors.New("storage down")

func newFlakyStorage(t *testing.T) *flakyStorage {
	s := &flakyStorage{mapStorage: newMapStorage(), release: make(chan struct{})}
	t.Cleanup(s.unhang)
	return s
}

func (s *flakyStorage) unhang() { s.once.Do(func() { close(s.release) }) }

func (s *flakyStorage) fail(key string) error {
	if key == s.badKey {
		return errors.New("key too long for its column")
	}
	if key == s.hangKey {
		<-s.release
	}
	switch s.mode.Load() {
	case storageErr:
		return errStorageDown
	case storageHung:
		<-s.release
		if s.mode.Load() == storageHung {
			return errStorageDown
		}
		return s.fail(key) // as the mode is now
	case storagePanic:
		panic("storage bug")
	}
	return nil
}

func (s *flakyStorage) Get(key string) ([]byte, error) {
	s.gets.Add(1)
	defer s.gotten.Add(1)
	if err := s.fail(key); err != nil {
		return nil, err
	}
	return s.mapStorage.Get(key)
}

func (s *flakyStorage) Set(key string, val []byte, exp time.Duration) error {
	if err := s.fail(key); err != nil {
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

// The breaker opens after BreakerFailures calls in a row have timed out:
// then requests do not wait on the storage. After BreakerCooldown a probe
// goes to the storage in the background (no request waits on it either); a
// probe that times out keeps the breaker open for another cool-down, and
// one that is answered closes it: the shared count is used again.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	store := newFlakyStorage(t)
	clock := &testClock{}
	const timeout = 20 * time.Millisecond
	app := newApp(Config{
		Max: 100, Expiration: time.Hour, Storage: store, StorageTimeout: timeout,
		BreakerFailures: 3, BreakerCooldown: time.Second,
	}, clock, nil)
	waited := func() bool { // sends a request: did it wait for the timeout?
		start := time.Now()
		require.Equal(t, 200, get(t, app, "/", "").StatusCode)
		return time.Since(start) >= timeout
	}

	require.False(t, waited())
	require.False(t, waited())
	store.mode.Store(storageHung)
	for i := range 3 {
		require.True(t, waited(), "timeout %d", i)
	}
	calls := store.gets.Load()
	for i := range 5 {
		require.False(t, waited(), "request %d: the breaker is open", i)
	}
	clock.advance(999 * time.Millisecond)
	require.False(t, waited(), "still cooling down")
	require.Equal(t, calls, store.gets.Load(), "no call while open")
	clock.advance(time.Millisecond)
	require.False(t, waited(), "the cool-down is over: a probe starts, this request does not wait")
	require.Eventually(t, func() bool { return store.gets.Load() == calls+1 }, time.Second, time.Millisecond, "the probe")
	time.Sleep(2 * timeout) // the probe times out
	require.False(t, waited(), "the probe timed out: open again")
	require.Equal(t, calls+1, store.gets.Load())

	clock.advance(time.Second)
	store.mode.Store(storageUp)
	store.unhang()
	require.False(t, waited(), "starts the second probe")
	require.Eventually(t, func() bool {
		return get(t, app, "/", "").Header.Get("X-RateLimit-Remaining") == "97"
	}, time.Second, time.Millisecond, "closed: the shared count (the first 2 and this one), not the fallback's")
}

// Errors that the storage answers at once do not open the breaker: a client
// whose key the storage rejects cannot switch the limiter off for others.
func TestQuickErrorsDoNotOpenTheBreaker(t *testing.T) {
	store := newFlakyStorage(t)
	store.badKey = "limiter::fw:1m:evil key"
	app := newApp(Config{
		Max: 1, Storage: store, KeyGenerator: headerKey, FailurePolicy: FailClosed, BreakerFailures: 2,
	}, &testClock{}, nil)
	for range 20 {
		require.Equal(t, 503, get(t, app, "/", "evil key").StatusCode)
	}
	assert.Equal(t, 200, get(t, app, "/", "alice").StatusCode)
	assert.Equal(t, 429, get(t, app, "/", "alice").StatusCode, "the storage still decides for others")
}

// A storage call that panics is a failure like any other: the policy
// answers, the process survives (the call runs on a goroutine, where
// Fiber's recover middleware could not catch it), and the next call works.
func TestStoragePanicIsAFailure(t *testing.T) {
	store := newFlakyStorage(t)
	var reported atomic.Int64
	app := newApp(Config{Max: 5, Storage: store, FailurePolicy: FailClosed, OnStorageError: func(err error) {
		assert.ErrorContains(t, err, "storage call panicked: storage bug")
		reported.Add(1)
	}}, &testClock{}, nil)
	store.mode.Store(storagePanic)
	require.Equal(t, 503, get(t, app, "/", "").StatusCode)
	assert.Equal(t, int64(1), reported.Load())
	store.mode.Store(storageUp)
	require.Equal(t, 200, get(t, app, "/", "").StatusCode)
}

// A request whose own context has ended (the client left, or the
// application gave it a deadline) is still decided by the storage: under
// FailOpen it would otherwise be admitted uncounted.
func TestEndedUserContextIsStillLimited(t *testing.T) {
	store := newFlakyStorage(t)
	clock := &testClock{}
	cfg := Config{Max: 1, Storage: store, FailurePolicy: FailOpen, clock: clock.millis}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		ctx, cancel := context.WithCancel(c.UserContext())
		cancel()
		c.SetUserContext(ctx)
		return c.Next()
	})
	app.Use(New(cfg))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	require.Equal(t, 200, get(t, app, "/", "").StatusCode)
	for range 5 {
		require.Equal(t, 429, get(t, app, "/", "").StatusCode)
	}
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

// A fiber.Storage call that hangs on one key does not pile up goroutines:
// calls for keys behind the same lock give up at their deadline instead of
// queuing, and the breaker does not open while other keys are answered.
func TestHangingKeyDoesNotPileUpGoroutines(t *testing.T) {
	store := newFlakyStorage(t)
	store.hangKey = "limiter::fw:1m:hang"
	app := newApp(Config{
		// The timeout is what a hung call costs each request; it is long
		// enough that the other keys' calls, on a loaded machine under the
		// race detector (with other packages' tests running beside), finish
		// within it.
		Max: 1000, Storage: store, KeyGenerator: headerKey, StorageTimeout: 100 * time.Millisecond, FailurePolicy: FailClosed,
	}, &testClock{}, nil)
	before := runtime.NumGoroutine()
	const rounds = 40
	admitted := 0
	for i := range rounds {
		assert.Equal(t, 503, get(t, app, "/", "hang").StatusCode, "request %d", i)
		// Other keys; about one in 64 shares the hung key's lock.
		if get(t, app, "/", "other-"+strconv.Itoa(i)).StatusCode == 200 {
			admitted++
		}
	}
	assert.GreaterOrEqual(t, admitted, rounds-6, "other keys were decided by the storage")
	time.Sleep(100 * time.Millisecond) // past the last waiter's deadline
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 5, "goroutines left behind")
}

// A call that the request gave up on does not count once the storage
// answers: the policy answered that request.
func TestAbandonedCallDoesNotCount(t *testing.T) {
	store := newFlakyStorage(t)
	app := newApp(Config{
		Max: 3, Storage: store, StorageTimeout: 10 * time.Millisecond, FailurePolicy: FailClosed, BreakerFailures: 100,
	}, &testClock{}, nil)
	store.mode.Store(storageHung)
	for range 5 {
		require.Equal(t, 503, get(t, app, "/", "").StatusCode)
	}
	store.mode.Store(storageUp)
	store.unhang()
	require.Eventually(t, func() bool { return store.gotten.Load() == store.gets.Load() }, time.Second, time.Millisecond)
	for i := range 3 {
		require.Equal(t, 200, get(t, app, "/", "").StatusCode, "request %d", i)
	}
	require.Equal(t, 429, get(t, app, "/", "").StatusCode)
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
