package nethttp

import (
	"bytes"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Redis client or Storage that is a nil pointer of its type panics at
// New, naming the field, not at the first request.
func TestNewPanicsOnNilClientOrStorage(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nil *redis.Client as Redis", Config{Redis: (*goredis.Client)(nil)}, "limiter: Redis is a nil *redis.Client"},
		{"nil storage/redis Store as Storage", Config{Storage: (*redis.Store)(nil)}, "limiter: Storage is a nil *redis.Store"},
		{"nil Storage of another kind", Config{Storage: (*nilStorage)(nil)}, "limiter: Storage is a nil *nethttp.nilStorage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want+"; make it with its package's New, or leave "+strings.Fields(tc.want)[1]+" unset", func() { New(tc.cfg) })
		})
	}
}

type nilStorage struct{ quota.Storage }

// A Redis that refuses the client (a wrong password) is logged once at New,
// with the limiter: prefix, and the middleware runs: its requests go to
// FailurePolicy. An invalid field still panics.
func TestNewLogsRedisRefusal(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "secret")
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "wrong"})
	t.Cleanup(func() { _ = client.Close() })
	var mu sync.Mutex
	var buf bytes.Buffer
	prev, flags := log.Writer(), log.Flags()
	log.SetOutput(writer(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) }))
	t.Cleanup(func() { log.SetOutput(prev); log.SetFlags(flags) })

	var mw func(http.Handler) http.Handler
	require.NotPanics(t, func() {
		mw = New(Config{Redis: client, Max: 10, OnStorageError: func(error) {}})
	})
	mu.Lock()
	logged := buf.String()
	mu.Unlock()
	assert.Equal(t, 1, strings.Count(logged, "WRONGPASS"), logged)
	assert.Contains(t, logged, "limiter: ")
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusOK, rec.Code, "FailFallback admits")

	assert.PanicsWithValue(t, "limiter: MaxKeys is -1; it must be >= 0 (0 means the default)", func() {
		New(Config{Redis: client, Max: 10, MaxKeys: -1})
	})
}

type writer func(p []byte) (int, error)

func (f writer) Write(p []byte) (int, error) { return f(p) }
