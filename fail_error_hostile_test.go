package limiter

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// Hostile tests of FailError, and of what a client sees of a
// storage error through Fiber's DEFAULT error handler (which answers the
// error's text as the body).

// secretKey is a key a client must not read back while redaction is on.
const secretKey = "tenant-7f3a9c-secret"

// defaultHandlerBody serves GET / behind cfg in an app with Fiber's
// default error handler, and returns the status and the body.
func defaultHandlerBody(t *testing.T, cfg Config) (int, string) {
	t.Helper()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(cfg))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil), -1)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// With FailError and Fiber's default error handler a client reads the
// error's text. It must not hold the Redis password, and with redaction
// on not the key.
func TestHostileFailErrorBodyHoldsNoSecret(t *testing.T) {
	captureLogOutput(t)
	const password = "hunter2-redteam-pw"
	server := redistest.Start(t, "--requirepass", password)
	wrong := goredis.NewClient(&goredis.Options{Addr: server.Addr(), Password: password + "-wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = wrong.Close() })
	dead := goredis.NewClient(&goredis.Options{Addr: deadAddr(t), Password: password, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	for _, tc := range []struct {
		name  string
		store fiber.Storage
	}{
		{"wrong password", redis.New(wrong)},
		{"Redis down", redis.New(dead)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{
				Max: 5, Expiration: time.Minute, Storage: tc.store, FailurePolicy: FailError,
				KeyGenerator: func(*fiber.Ctx) string { return secretKey }, StorageTimeout: 2 * time.Second,
				OnStorageError: func(error) {},
			}
			status, body := defaultHandlerBody(t, cfg)
			t.Logf("a client reads: %d %q", status, body)
			assert.Equal(t, fiber.StatusInternalServerError, status)
			assert.NotContains(t, body, password)
			assert.NotContains(t, body, secretKey)
		})
	}
}

// echoingStorage is a fiber.Storage whose failing Get names the key it was
// asked for, as many stores' errors do.
type echoingStorage struct{ brokenStorage }

func (s *echoingStorage) Get(key string) ([]byte, error) {
	return nil, fmt.Errorf("store: get %q: %w", key, errBroken)
}

// With redaction on (the default) the key must not reach the error that
// the app's error handler gets, even when the store's own error names it.
func TestHostileFailErrorRedactsKeyInStoreError(t *testing.T) {
	cfg := Config{
		Max: 5, Expiration: time.Minute, Storage: &echoingStorage{}, FailurePolicy: FailError,
		KeyGenerator: func(*fiber.Ctx) string { return secretKey }, OnStorageError: func(error) {},
	}
	status, err := serveCapturing(t, cfg, nil)
	require.Equal(t, fiber.StatusInternalServerError, status)
	require.ErrorIs(t, err, errBroken)
	assert.NotContains(t, err.Error(), secretKey, "redaction is on")
}

// Three replicas on one Redis under FailError, with BlockFor and
// MinInterval 0 (the count alone), while connections are killed under
// them: the failed requests get 500, and never is more than Max admitted.
//
// The client runs without retries (MaxRetries -1): with go-redis's
// default retries a script whose reply a killed connection lost is run
// again, counting the request twice, which never over-admits but shrinks
// the quota (docs/redis.md says so).
func TestHostileFailErrorExactWhileCallsFail(t *testing.T) {
	failErrorExact(t, -1)
}

func failErrorExact(t *testing.T, retries int) {
	captureLogOutput(t)
	server := redistest.Start(t)
	admin := server.Client(t)
	const maxN = 25
	replicas := make([]fasthttp.RequestHandler, 3)
	for i := range replicas {
		replicas[i] = replicaHandler(Config{
			Max: maxN, Expiration: time.Hour, Storage: redis.New(retryClient(t, server, retries)),
			FailurePolicy: FailError, StorageTimeout: 10 * time.Second, OnStorageError: func(error) {},
		})
	}
	var ok, rejected, failed atomic.Int64
	stop := make(chan struct{})
	var killer sync.WaitGroup
	killer.Add(1)
	go func() {
		defer killer.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				_ = admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
			}
		}
	}()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= 600 {
				i := next.Load()
				status, body := serveKeyed(replicas[i%3], "k")
				switch status {
				case fiber.StatusOK:
					ok.Add(1)
				case fiber.StatusTooManyRequests:
					rejected.Add(1)
				case fiber.StatusInternalServerError:
					failed.Add(1)
				default:
					t.Errorf("status %d: %s", status, body)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	killer.Wait()
	t.Logf("admitted %d of Max %d, 429 %d, 500 %d", ok.Load(), maxN, rejected.Load(), failed.Load())
	assert.LessOrEqual(t, ok.Load(), int64(maxN))
	// Without failures, exactly Max: once the killing stops, the rest of
	// the quota is there for the taking and no more.
	more := 0
	for range 2 * maxN {
		if status, _ := serveKeyed(replicas[more%3], "k"); status == fiber.StatusOK {
			more++
		}
	}
	assert.LessOrEqual(t, ok.Load()+int64(more), int64(maxN), "admitted in all")
	assert.GreaterOrEqual(t, ok.Load()+int64(more)+failed.Load(), int64(maxN), "a quota lost beyond the failed calls")
}

// Target 7: a client that sends no key makes one log line per limiter,
// however many requests.
func TestHostileEmptyKeyLogsOnce(t *testing.T) {
	logs := captureLogOutput(t)
	app := newApp(Config{Max: 1000, Expiration: time.Minute, KeyGenerator: headerKey}, nil, nil)
	for range 200 {
		get(t, app, "/", "")
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "empty key"), "log: %s", logs.String())
}

func retryClient(t *testing.T, s *redistest.Server, retries int) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: retries})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
