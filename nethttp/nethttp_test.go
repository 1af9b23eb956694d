package nethttp

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The net/http middleware builds without Fiber or fasthttp.
func TestNoFiberBelow(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/fiberlimit/limiter/quota")
	for _, dep := range deps {
		require.NotContains(t, dep, "gofiber")
		require.NotContains(t, dep, "valyala")
	}
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

// from sends GET / from the client address addr ("host:port").
func from(h http.Handler, addr string) *http.Response {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

// By default a client is keyed by its address: an IPv6 client by its /64,
// so a host cannot rotate past the limit within its network; IPv6Prefix
// 128 keys each address on its own.
func TestRemoteAddressKeys(t *testing.T) {
	h := New(Config{Max: 2})(http.HandlerFunc(ok))
	assert.Equal(t, 200, from(h, "[2001:db8:1:2::1]:1000").StatusCode)
	assert.Equal(t, 200, from(h, "[2001:db8:1:2::ffff]:2000").StatusCode)
	assert.Equal(t, 429, from(h, "[2001:db8:1:2:aaaa::9]:3000").StatusCode, "the same /64")
	assert.Equal(t, 200, from(h, "[2001:db8:1:3::1]:1000").StatusCode, "another /64")
	assert.Equal(t, 200, from(h, "203.0.113.7:1").StatusCode)

	each := New(Config{Max: 1, IPv6Prefix: 128})(http.HandlerFunc(ok))
	assert.Equal(t, 200, from(each, "[2001:db8::1]:1").StatusCode)
	assert.Equal(t, 200, from(each, "[2001:db8::2]:1").StatusCode)
	assert.Equal(t, 429, from(each, "[2001:DB8:0::2]:9").StatusCode, "the same address, spelled otherwise")
}

// A handler that streams through http.ResponseController still can: the
// middleware's writer unwraps to the server's; the headers go out with
// the status, before the first byte.
func TestStreamingHandler(t *testing.T) {
	h := New(Config{Max: 5})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("part"))
		require.NoError(t, http.NewResponseController(w).Flush())
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer func() { assert.NoError(t, resp.Body.Close()) }()
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))
}

// A handler that flushes before it writes (server-sent events) still sends
// the headers; one that type-asserts Flusher and Hijacker finds them.
func TestFlushFirstAndInterfaces(t *testing.T) {
	var flusher, hijacker bool
	h := New(Config{Max: 5})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, flusher = w.(http.Flusher)
		_, hijacker = w.(http.Hijacker)
		require.NoError(t, http.NewResponseController(w).Flush())
		_, _ = w.Write([]byte("event"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer func() { assert.NoError(t, resp.Body.Close()) }()
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))
	assert.True(t, flusher)
	assert.True(t, hijacker)
}

// Two limiters stacked with a writer-wrapping middleware between them: the
// inner one's rejection keeps its own fields; the outer one does not
// overwrite them.
func TestStackedThroughAWrapper(t *testing.T) {
	inner := New(Config{Max: 1, KeyGenerator: func(*http.Request) string { return "k" }})
	outer := New(Config{Max: 10, KeyGenerator: func(*http.Request) string { return "k" }})
	wrap := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&unwrapper{w}, r)
		})
	}
	outermost := New(Config{Max: 20, KeyGenerator: func(*http.Request) string { return "k" }})
	h := outermost(outer(wrap(inner(http.HandlerFunc(ok)))))
	assert.Equal(t, 200, from(h, "192.0.2.1:1").StatusCode)
	resp := from(h, "192.0.2.1:1")
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Limit"), "the inner limiter's")
	assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
}

// A hijack that fails (HTTP/2, a recorder) leaves the response to the
// handler: its 500 gets the headers, and SkipFailedRequests its refund.
// So does a flush on a writer that cannot flush.
func TestFailedHijackAndFlush(t *testing.T) {
	for name, act := range map[string]func(w http.ResponseWriter){
		"hijack": func(w http.ResponseWriter) { _, _, _ = http.NewResponseController(w).Hijack() },
		"flush":  func(w http.ResponseWriter) { w.(http.Flusher).Flush() },
	} {
		t.Run(name, func(t *testing.T) {
			h := New(Config{Max: 5, SkipFailedRequests: true})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				act(w)
				w.WriteHeader(http.StatusInternalServerError)
			}))
			for range 3 {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				w := &plainWriter{header: http.Header{}}
				h.ServeHTTP(w, req)
				assert.Equal(t, 500, w.status)
				assert.Equal(t, "5", w.header.Get("X-RateLimit-Remaining"), "refunded")
			}
		})
	}
}

// plainWriter is a ResponseWriter that can neither flush nor hijack.
type plainWriter struct {
	header http.Header
	status int
}

func (w *plainWriter) Header() http.Header         { return w.header }
func (w *plainWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *plainWriter) WriteHeader(status int)      { w.status = status }

// unwrapper is a middleware's ResponseWriter that unwraps to the next.
type unwrapper struct{ http.ResponseWriter }

func (u *unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// Three servers, each with its own go-redis client, share one Redis:
// exactly Max of 200 concurrent requests are admitted, for each algorithm.
func TestExactAcrossReplicas(t *testing.T) {
	server := redistest.Start(t)
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindow, quota.TokenBucket, quota.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			var replicas []http.Handler
			for range 3 {
				client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 16})
				t.Cleanup(func() { _ = client.Close() })
				replicas = append(replicas, New(Config{
					Algorithm: alg, Max: 20, Expiration: time.Minute, Redis: client, Name: "nethttp",
					FailurePolicy: quota.FailClosed, StorageTimeout: 10 * time.Second,
					KeyGenerator: func(*http.Request) string { return "exact-" + alg.String() },
				})(http.HandlerFunc(ok)))
			}
			var admitted, next atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1); i <= 200; i = next.Add(1) {
						switch code := from(replicas[i%3], "192.0.2.1:"+strconv.Itoa(int(i))).StatusCode; code {
						case 200:
							admitted.Add(1)
						case 429:
						default:
							t.Errorf("status %d", code)
						}
					}
				})
			}
			wg.Wait()
			assert.Equal(t, int64(20), admitted.Load())
		})
	}
}
