package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testToken = "0123456789abcdef0123456789abcdef"

// do sends a request to app and returns its status, headers and body.
func do(t *testing.T, app *fiber.App, method, target string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := app.Test(req, -1)
	require.NoError(t, err)
	defer func() { require.NoError(t, resp.Body.Close()) }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, body
}

// call is do on the public API as customer acme.
func call(t *testing.T, s *server) (int, http.Header) {
	t.Helper()
	code, h, _ := do(t, s.public, fiber.MethodGet, "/api/hello", apiKeyHeader, "demo-key-acme")
	return code, h
}

// admin is do on the admin API with the right token.
func admin(t *testing.T, s *server, method, target string) (int, []byte) {
	t.Helper()
	code, _, body := do(t, s.admin, method, target, fiber.HeaderAuthorization, "Bearer "+testToken)
	return code, body
}

// peek is GET /admin/limits/acme, decoded.
func peek(t *testing.T, s *server) statusView {
	t.Helper()
	code, body := admin(t, s, fiber.MethodGet, "/admin/limits/acme")
	require.Equal(t, fiber.StatusOK, code, "%s", body)
	var v statusView
	require.NoError(t, json.Unmarshal(body, &v))
	require.Len(t, v.Limits, 2)
	return v
}

// exhaust spends acme's 5 a minute and sees the 6th rejected.
func exhaust(t *testing.T, s *server) {
	t.Helper()
	for i := range 5 {
		code, _ := call(t, s)
		require.Equal(t, fiber.StatusOK, code, "request %d", i+1)
	}
	code, _ := call(t, s)
	require.Equal(t, fiber.StatusTooManyRequests, code)
}

func newTestServer(t *testing.T) *server {
	t.Helper()
	s, err := newServer(testToken, nil)
	require.NoError(t, err)
	return s
}

// Without a token of at least minTokenLen, there is no server at all.
func TestNoServerWithoutToken(t *testing.T) {
	for _, token := range []string{"", "short", "0123456789abcde"} {
		s, err := newServer(token, nil)
		assert.Nil(t, s, "token %q", token)
		assert.ErrorContains(t, err, "ADMIN_TOKEN", "token %q", token)
	}
}

// Every admin route answers 401 to a request without the token, and the
// public listener has no admin route at all.
func TestAdminNeedsToken(t *testing.T) {
	s := newTestServer(t)
	exhaust(t, s)
	routes := []struct{ method, target string }{
		{fiber.MethodGet, "/admin/limits/acme"},
		{fiber.MethodDelete, "/admin/limits/acme"},
		{fiber.MethodPost, "/admin/limits/acme/block?for=1h"},
		{fiber.MethodGet, "/admin/limits/nobody"},
	}
	auths := map[string][]string{
		"no header":    nil,
		"wrong token":  {fiber.HeaderAuthorization, "Bearer " + testToken[1:] + "x"},
		"token prefix": {fiber.HeaderAuthorization, "Bearer " + testToken[:20]},
		"no scheme":    {fiber.HeaderAuthorization, testToken},
		"basic scheme": {fiber.HeaderAuthorization, "Basic " + testToken},
		"empty bearer": {fiber.HeaderAuthorization, "Bearer "},
		"other header": {"X-Admin-Token", testToken},
	}
	for name, header := range auths {
		for _, r := range routes {
			code, h, _ := do(t, s.admin, r.method, r.target, header...)
			assert.Equal(t, fiber.StatusUnauthorized, code, "%s: %s %s", name, r.method, r.target)
			assert.Equal(t, `Bearer realm="admin"`, h.Get(fiber.HeaderWWWAuthenticate), "%s", name)
		}
	}
	for _, r := range routes {
		code, _, _ := do(t, s.public, r.method, r.target, fiber.HeaderAuthorization, "Bearer "+testToken)
		assert.Equal(t, fiber.StatusNotFound, code, "public %s %s", r.method, r.target)
	}
	// Nothing above reset or blocked acme.
	code, _ := call(t, s)
	assert.Equal(t, fiber.StatusTooManyRequests, code)
	v := peek(t, s)
	assert.False(t, v.Blocked)
	// The scheme is case-insensitive.
	code, _, _ = do(t, s.admin, fiber.MethodGet, "/admin/limits/acme", fiber.HeaderAuthorization, "bearer "+testToken)
	assert.Equal(t, fiber.StatusOK, code)
}

// The public API wants a known API key.
func TestPublicNeedsAPIKey(t *testing.T) {
	s := newTestServer(t)
	for _, header := range [][]string{nil, {apiKeyHeader, ""}, {apiKeyHeader, "acme"}, {apiKeyHeader, "demo-key-nobody"}} {
		code, _, _ := do(t, s.public, fiber.MethodGet, "/api/hello", header...)
		assert.Equal(t, fiber.StatusUnauthorized, code, "%v", header)
	}
}

// An exhausted customer shows as such, with each limit's state; the other
// customers are untouched; and an unknown one is 404.
func TestPeekShowsExhausted(t *testing.T) {
	s := newTestServer(t)
	exhaust(t, s)
	v := peek(t, s)
	assert.Equal(t, "acme", v.Customer)
	assert.False(t, v.Allowed)
	assert.False(t, v.Blocked)
	assert.Zero(t, v.HeldMS)
	require.NotNil(t, v.RetryAfterMS)
	assert.InDelta(t, time.Minute.Milliseconds(), *v.RetryAfterMS, 5000)

	minute, hour := v.Limits[0], v.Limits[1]
	assert.Equal(t, 5, minute.Limit)
	assert.Equal(t, time.Minute.Milliseconds(), minute.WindowMS)
	assert.Zero(t, minute.Remaining)
	assert.InDelta(t, time.Minute.Milliseconds(), minute.ResetAfterMS, 5000)
	require.NotNil(t, minute.RetryAfterMS)
	assert.Positive(t, *minute.RetryAfterMS)
	assert.Equal(t, 100, hour.Limit)
	assert.Equal(t, 95, hour.Remaining)
	require.NotNil(t, hour.RetryAfterMS)
	assert.Zero(t, *hour.RetryAfterMS, "the hour's limit would admit")

	code, body := admin(t, s, fiber.MethodGet, "/admin/limits/globex")
	require.Equal(t, fiber.StatusOK, code)
	assert.Contains(t, string(body), `"remaining":5,`)
	for _, target := range []string{"/admin/limits/nobody", "/admin/limits/demo-key-acme", "/admin/limits/ac%2Fme"} {
		code, _ = admin(t, s, fiber.MethodGet, target)
		assert.Equal(t, fiber.StatusNotFound, code, target)
	}
}

// GET counts nothing: several leave remaining as it was, and the customer
// still has exactly what it had.
func TestPeekCountsNothing(t *testing.T) {
	s := newTestServer(t)
	for range 2 {
		code, _ := call(t, s)
		require.Equal(t, fiber.StatusOK, code)
	}
	for range 10 {
		v := peek(t, s)
		assert.True(t, v.Allowed)
		assert.Equal(t, 3, v.Limits[0].Remaining)
		assert.Equal(t, 98, v.Limits[1].Remaining)
	}
	for i := range 3 {
		code, _ := call(t, s)
		assert.Equal(t, fiber.StatusOK, code, "request %d", i+3)
	}
	code, _ := call(t, s)
	assert.Equal(t, fiber.StatusTooManyRequests, code)
}

// DELETE forgets the counts: the customer is admitted again, with its full
// quota under every limit.
func TestResetAdmitsAgain(t *testing.T) {
	s := newTestServer(t)
	exhaust(t, s)
	code, _ := admin(t, s, fiber.MethodDelete, "/admin/limits/acme")
	require.Equal(t, fiber.StatusNoContent, code)
	v := peek(t, s)
	assert.True(t, v.Allowed)
	assert.Equal(t, 5, v.Limits[0].Remaining)
	assert.Equal(t, 100, v.Limits[1].Remaining)
	code, h := call(t, s)
	assert.Equal(t, fiber.StatusOK, code)
	assert.Equal(t, "4", h.Get("X-Ratelimit-Remaining"))
}

// POST block holds the customer off with Retry-After, whatever its counts,
// until a reset lifts it.
func TestBlock(t *testing.T) {
	s := newTestServer(t)
	code, body := admin(t, s, fiber.MethodPost, "/admin/limits/acme/block?for=1h")
	require.Equal(t, fiber.StatusOK, code, "%s", body)
	var v statusView
	require.NoError(t, json.Unmarshal(body, &v))
	assert.True(t, v.Blocked)
	assert.False(t, v.Allowed)
	assert.InDelta(t, time.Hour.Milliseconds(), v.HeldMS, 1000)

	code, h := call(t, s)
	assert.Equal(t, fiber.StatusTooManyRequests, code)
	retry, err := strconv.Atoi(h.Get(fiber.HeaderRetryAfter))
	require.NoError(t, err)
	assert.InDelta(t, 3600, retry, 1)
	// The other customer is not held.
	code, _, _ = do(t, s.public, fiber.MethodGet, "/api/hello", apiKeyHeader, "demo-key-globex")
	assert.Equal(t, fiber.StatusOK, code)

	// The block kept the counts and counted nothing: a reset lifts it.
	v = peek(t, s)
	assert.True(t, v.Blocked)
	assert.Equal(t, 100, v.Limits[1].Remaining)
	code, _ = admin(t, s, fiber.MethodDelete, "/admin/limits/acme")
	require.Equal(t, fiber.StatusNoContent, code)
	code, _ = call(t, s)
	assert.Equal(t, fiber.StatusOK, code)

	// Days are understood.
	code, body = admin(t, s, fiber.MethodPost, "/admin/limits/acme/block?for=7d")
	require.Equal(t, fiber.StatusOK, code, "%s", body)
	_, h = call(t, s)
	retry, err = strconv.Atoi(h.Get(fiber.HeaderRetryAfter))
	require.NoError(t, err)
	assert.InDelta(t, 7*24*3600, retry, 1)
}

// A bad for is 400 with a reason, and blocks nothing.
func TestBlockRefusesBadDurations(t *testing.T) {
	s := newTestServer(t)
	code, _ := call(t, s)
	require.Equal(t, fiber.StatusOK, code)
	for _, tc := range []struct{ query, reason string }{
		{"", "for is required"},
		{"?for=", "for is required"},
		{"?for=-1s", "out of range"},
		{"?for=0s", "out of range"},
		{"?for=0", "out of range"},
		{"?for=-1d", "out of range"},
		{"?for=x", "not a duration"},
		{"?for=1y", "not a duration"},
		{"?for=1.5d", "not a duration"},
		{"?for=99999999999999999999d", "not a duration"},
		{"?for=400d", "out of range"},
		{"?for=366d", "out of range"},
		{"?for=8761h", "out of range"},
	} {
		code, body := admin(t, s, fiber.MethodPost, "/admin/limits/acme/block"+tc.query)
		assert.Equal(t, fiber.StatusBadRequest, code, "%q", tc.query)
		assert.Contains(t, string(body), tc.reason, "%q", tc.query)
	}
	v := peek(t, s)
	assert.False(t, v.Blocked)
	assert.True(t, v.Allowed)
	assert.Equal(t, 4, v.Limits[0].Remaining)
	code, _ = call(t, s)
	assert.Equal(t, fiber.StatusOK, code)

	// The edge of the range is accepted.
	code, body := admin(t, s, fiber.MethodPost, "/admin/limits/acme/block?for=365d")
	assert.Equal(t, fiber.StatusOK, code, "%s", body)
}

// On Redis, two replicas of the app share the counts, and a block or a
// reset made through one replica's admin API holds on the other within a
// second.
func TestReplicasOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	replicas := make([]*server, 2)
	for i := range replicas {
		store, err := openRedis(t.Context(), "redis://"+srv.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close() })
		replicas[i], err = newServer(testToken, store)
		require.NoError(t, err)
	}
	a, b := replicas[0], replicas[1]
	for range 3 {
		code, _ := call(t, a)
		require.Equal(t, fiber.StatusOK, code)
	}
	assert.Equal(t, 2, peek(t, b).Limits[0].Remaining, "b sees a's counts")

	code, _ := admin(t, a, fiber.MethodPost, "/admin/limits/acme/block?for=1h")
	require.Equal(t, fiber.StatusOK, code)
	assert.True(t, within(time.Second, func() bool { c, _ := call(t, b); return c == fiber.StatusTooManyRequests }),
		"b rejects within a second")
	code, _ = admin(t, b, fiber.MethodDelete, "/admin/limits/acme")
	require.Equal(t, fiber.StatusNoContent, code)
	assert.True(t, within(time.Second, func() bool { c, _ := call(t, a); return c == fiber.StatusOK }),
		"a admits within a second")
}

// within reports whether ok returns true before d has passed, trying it
// every 20 ms on the test's goroutine.
func within(d time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if ok() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
