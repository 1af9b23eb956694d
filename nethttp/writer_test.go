package nethttp

// The middleware's ResponseWriter: headers before the first byte, Flusher, Hijacker, ReaderFrom.

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The middleware's writer keeps io.ReaderFrom, through which net/http
// sends a file by sendfile (http.ServeContent, io.Copy): a file served
// through it arrives whole, with the rate-limit headers; over a writer
// that has no ReadFrom, the copy goes through Write.
func TestReaderFromKept(t *testing.T) {
	file := filepath.Join(t.TempDir(), "body")
	body := strings.Repeat("0123456789", 10_000)
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))

	var readerFrom bool
	h := New(Config{Max: 5})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, readerFrom = w.(io.ReaderFrom)
		f, err := os.Open(file)
		if !assert.NoError(t, err) {
			return
		}
		defer func() { _ = f.Close() }()
		_, err = io.Copy(w, f)
		assert.NoError(t, err)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.True(t, readerFrom)
	assert.Equal(t, body, string(got))
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))

	// Over a writer without ReadFrom.
	h = New(Config{Max: 5})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n, err := io.Copy(w, strings.NewReader(body))
		assert.NoError(t, err)
		assert.Equal(t, int64(len(body)), n)
	}))
	w := &bodyWriter{plainWriter: plainWriter{header: http.Header{}}}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, body, w.body.String())
	assert.Equal(t, "4", w.header.Get("X-RateLimit-Remaining"))
}

// bodyWriter is a plainWriter that keeps what is written.
type bodyWriter struct {
	plainWriter
	body strings.Builder
}

func (w *bodyWriter) Write(b []byte) (int, error) { return w.body.Write(b) }

// A handler that panics before it writes its status failed: under
// SkipFailedRequests its cost is given back, as for a 500 it returns,
// and the panic goes on to the middleware in front that recovers it.
func TestPanickingHandlerIsFailed(t *testing.T) {
	recoverer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					assert.Equal(t, "boom", v)
					w.WriteHeader(http.StatusInternalServerError)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
	tests := []struct {
		name       string
		skipFailed bool
		want       []int
		remaining  []string
	}{
		{"SkipFailedRequests", true, []int{500, 500, 500, 500}, []string{"2", "2", "2", "2"}},
		{"counted", false, []int{500, 500, 429, 429}, []string{"1", "0", "0", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := recoverer(New(Config{Max: 2, SkipFailedRequests: tt.skipFailed})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				panic("boom")
			})))
			var codes []int
			var remaining []string
			for range 4 {
				resp := from(h, "192.0.2.1:1")
				codes = append(codes, resp.StatusCode)
				remaining = append(remaining, resp.Header.Get("X-RateLimit-Remaining"))
			}
			assert.Equal(t, tt.want, codes)
			assert.Equal(t, tt.remaining, remaining)
		})
	}
}

// failingReader fails on its first read, before it yields a byte.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("backend gone") }

// A copy whose source fails before its first byte sends nothing: the
// handler can still answer with an error, which SkipFailedRequests then
// gives back, as net/http's own ReadFrom allows; an empty source sends
// nothing either, and the handler's return settles 200.
func TestReadFromSendsNothingBeforeTheSource(t *testing.T) {
	h := New(Config{Max: 2, SkipFailedRequests: true})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if _, err := io.Copy(w, failingReader{}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))
	var codes []int
	var remaining []string
	for range 4 {
		resp := from(h, "192.0.2.1:1")
		codes = append(codes, resp.StatusCode)
		remaining = append(remaining, resp.Header.Get("X-RateLimit-Remaining"))
	}
	assert.Equal(t, []int{500, 500, 500, 500}, codes)
	assert.Equal(t, []string{"2", "2", "2", "2"}, remaining)

	empty := New(Config{Max: 2, SkipSuccessfulRequests: true})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, err := io.Copy(w, strings.NewReader(""))
		assert.NoError(t, err)
	}))
	resp := from(empty, "192.0.2.1:1")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("X-RateLimit-Remaining"), "a 200, given back")
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
