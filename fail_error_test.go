package limiter

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// brokenStorage is a fiber.Storage in memory whose Get, Set or both fail
// (after setsOK good Sets).
type brokenStorage struct {
	mu            sync.Mutex
	data          map[string][]byte
	failGet       bool
	failSet       bool
	setsOK, sets  int
	gets, setsAll int
}

var errBroken = errors.New("storage is broken")

func (s *brokenStorage) Get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if s.failGet {
		return nil, errBroken
	}
	return s.data[key], nil
}

func (s *brokenStorage) Set(key string, val []byte, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setsAll++
	if s.failSet {
		if s.sets >= s.setsOK {
			return errBroken
		}
		s.sets++
	}
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	s.data[key] = append([]byte(nil), val...)
	return nil
}

func (s *brokenStorage) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.data, key)
	return nil
}

func (*brokenStorage) Reset() error { return nil }
func (*brokenStorage) Close() error { return nil }

// serveCapturing serves GET / behind a limiter of cfg, in an app whose
// error handler records the error it is given and answers 500; it returns
// the status and that error.
func serveCapturing(t *testing.T, cfg Config, handler fiber.Handler) (int, error) {
	t.Helper()
	var captured error
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: func(c *fiber.Ctx, err error) error {
		captured = err
		return c.Status(fiber.StatusInternalServerError).SendString("storage failure")
	}})
	app.Use(New(cfg))
	if handler == nil {
		handler = func(c *fiber.Ctx) error { return c.SendString("ok") }
	}
	app.Get("/", handler)
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, captured
}

// FailError is Fiber's behaviour on a storage error: the error, wrapped,
// goes to the app's error handler, its key "[redacted]" unless
// DisableValueRedaction; a refund's failed Set too. The default,
// FailFallback, decides the request in memory instead.
func TestFailErrorHandsTheErrorToFiber(t *testing.T) {
	key := func(*fiber.Ctx) string { return "client-key" }
	quiet := func(error) {}
	for _, tc := range []struct {
		name     string
		cfg      Config
		store    *brokenStorage
		status   int
		contains []string
		lacks    string
	}{
		{"get fails", Config{FailurePolicy: FailError}, &brokenStorage{failGet: true},
			500, []string{"limiter: failed to get key", "[redacted]"}, "client-key"},
		{"set fails", Config{FailurePolicy: FailError}, &brokenStorage{failSet: true},
			500, []string{"limiter: failed to persist state", "limiter: failed to store key", "[redacted]"}, "client-key"},
		{"get fails, key shown", Config{FailurePolicy: FailError, DisableValueRedaction: true}, &brokenStorage{failGet: true},
			500, []string{"client-key"}, "[redacted]"},
		{"the refund's set fails", Config{FailurePolicy: FailError, SkipSuccessfulRequests: true}, &brokenStorage{failSet: true, setsOK: 1},
			500, []string{"limiter: failed to persist state", "[redacted]"}, "client-key"},
		{"FailFallback, the default, admits", Config{}, &brokenStorage{failGet: true}, 200, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Storage, cfg.KeyGenerator, cfg.OnStorageError = tc.store, key, quiet
			cfg.Max, cfg.Expiration = 10, time.Minute
			status, err := serveCapturing(t, cfg, nil)
			require.Equal(t, tc.status, status)
			if tc.contains == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errBroken)
			for _, s := range tc.contains {
				assert.ErrorContains(t, err, s)
			}
			assert.NotContains(t, err.Error(), tc.lacks)
		})
	}
}

// With FailError every request calls the storage: no breaker or fallback
// answers in its place, however many fail.
func TestFailErrorCallsStorageEveryTime(t *testing.T) {
	store := &brokenStorage{failGet: true}
	cfg := Config{Storage: store, FailurePolicy: FailError, OnStorageError: func(error) {}, KeyGenerator: headerKey}
	for range 20 {
		status, err := serveCapturing(t, cfg, nil)
		require.Equal(t, 500, status)
		require.ErrorIs(t, err, errBroken)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	assert.Equal(t, 20, store.gets)
}

// DisableHeaders sends no Retry-After on FailClosed's 503 either.
func TestDisableHeadersFailClosed(t *testing.T) {
	for _, disable := range []bool{false, true} {
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(New(Config{Storage: &brokenStorage{failGet: true}, FailurePolicy: FailClosed, DisableHeaders: disable, OnStorageError: func(error) {}}))
		app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
		resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
		require.NoError(t, err)
		require.Equal(t, fiber.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, disable, resp.Header.Get("Retry-After") == "", "DisableHeaders %v", disable)
	}
}
