package nethttp

import (
	"bufio"
	"io"
	"net"
	"net/http"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
)

// responseWriter holds an admitted request's response until its status is
// known: then (at WriteHeader, the first Write, or the handler's return)
// it gives the cost back as Skip*Requests says, and sets the rate-limit
// headers of the state that leaves, before the status goes out.
type responseWriter struct {
	http.ResponseWriter
	l    *limiter
	r    *http.Request
	req  adapter.Request
	res  quota.Result
	done bool
	// rejectedBehind: a limiter of this package behind this one rejected
	// the request (see markRejected).
	rejectedBehind bool
}

// before runs once, just before the status goes out.
func (w *responseWriter) before(status int) {
	if w.done {
		return
	}
	w.done = true
	// The status is the handler's: with FailError, a failed refund can no
	// longer change it (the Fiber adapters hand it to the error handler).
	_ = w.l.Finish(w.r.Context(), &w.req, status, &w.res)
	var out headers.Out
	w.l.Headers.WriteAdmitted(&out, fields(w.Header()), &w.res, w.req.Key, w.l.DryRun, w.rejectedBehind)
	setFields(w.Header(), &out)
}

func (w *responseWriter) WriteHeader(status int) {
	if status >= 200 || status == http.StatusSwitchingProtocols {
		w.before(status)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.before(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies src to the client, through the wrapped writer's
// ReadFrom when it has one (net/http's sends a file by sendfile), else
// through Write. As net/http's own, it sends nothing before src yields its
// first bytes: the first part goes through Write, whose first call settles
// the status (200), so that a handler whose copy fails before any byte can
// still answer with an error status, and be counted by it.
func (w *responseWriter) ReadFrom(src io.Reader) (int64, error) {
	var n int64
	if !w.done {
		first, err := io.Copy(writerOnly{w}, io.LimitReader(src, firstPart))
		n += first
		if err != nil || first < firstPart {
			return n, err // src ended (or failed) within the first part
		}
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		rest, err := rf.ReadFrom(src)
		return n + rest, err
	}
	rest, err := io.Copy(writerOnly{w.ResponseWriter}, src)
	return n + rest, err
}

// firstPart is how much ReadFrom copies through Write before it hands the
// rest on: net/http's sniffing length.
const firstPart = 512

// writerOnly hides all but Write of a writer, so that io.Copy writes
// through it.
type writerOnly struct{ io.Writer }

// Flush sends the status (with the rate-limit headers) and what has been
// written so far; a writer that cannot flush ignores it.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush, with the error of a writer that cannot flush, which
// leaves the status (and so the refund) to be settled when it is written.
func (w *responseWriter) FlushError() error {
	if !canFlush(w.ResponseWriter) {
		return http.NewResponseController(w.ResponseWriter).Flush()
	}
	w.before(http.StatusOK)
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// canFlush reports whether w, or a writer it unwraps to, can flush.
func canFlush(w http.ResponseWriter) bool {
	for range 16 {
		switch v := w.(type) {
		case http.Flusher, interface{ FlushError() error }:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return false
		}
	}
	return false
}

// Hijack hands the connection to the handler (a WebSocket upgrade, say);
// once it has it, the limiter writes nothing more. A hijack that fails
// leaves the response to the handler, headers and refund as usual.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.done = true
	}
	return conn, rw, err
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController
// (deadlines, and what else it finds there).
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// markRejected tells every limiter of this package in front of this one
// that the request was rejected here: they then leave this limiter's
// fields and Retry-After as they are. Their writers are w and those it
// unwraps to, through writers of other middlewares in between.
func markRejected(w http.ResponseWriter) {
	for range 64 {
		switch v := w.(type) {
		case *responseWriter:
			v.rejectedBehind = true
			w = v.ResponseWriter
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}

// fields are an http.Header, as package headers reads it.
type fields http.Header

func (f fields) Peek(name []byte) []byte {
	v := http.Header(f).Get(string(name))
	if v == "" {
		return nil
	}
	return []byte(v)
}

// setFields sets the fields of out on h.
func setFields(h http.Header, out *headers.Out) {
	for i := range out.Len() {
		name, value := out.Field(i)
		h.Set(string(name), string(value))
	}
}
