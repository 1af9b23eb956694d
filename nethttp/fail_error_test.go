package nethttp

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// downStorage is a Storage whose every call fails.
type downStorage struct{ calls int }

func (s *downStorage) Get(string) ([]byte, error) {
	s.calls++
	return nil, errors.New("down at 10.1.2.3:6379")
}
func (s *downStorage) Set(string, []byte, time.Duration) error { s.calls++; return errors.New("down") }
func (s *downStorage) Delete(string) error                     { s.calls++; return errors.New("down") }

// With FailError, a failed storage call answers 500 on every request, each
// calling the storage, and the client reads no part of the error (which
// names the store); FailClosed with DisableHeaders answers 503 without
// Retry-After.
func TestFailErrorAndDisableHeadersOnFailure(t *testing.T) {
	store := &downStorage{}
	h := New(Config{Storage: store, FailurePolicy: FailError, OnStorageError: func(error) {}})(http.HandlerFunc(ok))
	for range 5 {
		resp := from(h, "192.0.2.1:1000")
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.NotContains(t, string(body), "10.1.2.3")
	}
	assert.Equal(t, 5, store.calls, "no breaker answer in the storage's place")

	for _, disable := range []bool{false, true} {
		h := New(Config{Storage: &downStorage{}, FailurePolicy: FailClosed, DisableHeaders: disable, OnStorageError: func(error) {}})(http.HandlerFunc(ok))
		resp := from(h, "192.0.2.1:1000")
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, disable, resp.Header.Get("Retry-After") == "", "DisableHeaders %v", disable)
	}
}
