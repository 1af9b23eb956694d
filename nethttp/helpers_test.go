package nethttp

// Helpers shared by this package's tests.

import (
	"net/http"
	"net/http/httptest"
)

// ok is a handler that answers 200 "ok".
func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

// from sends GET / from the client address addr ("host:port").
func from(h http.Handler, addr string) *http.Response {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}
