package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// get sends GET path to app and returns the response, its body closed.
func get(t *testing.T, app *fiber.App, path string) *http.Response {
	t.Helper()
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, path, nil), -1)
	require.NoError(t, err, "GET %s", path)
	require.NoError(t, resp.Body.Close())
	return resp
}

// memoryApp is replica 1 of the app in memory, with the default /demo.
func memoryApp() *fiber.App {
	return newApp(appConfig{replica: 1, demo: defaultDemo})
}

func TestRootFixedWindow(t *testing.T) {
	checkRoot(t, memoryApp())
}

// With -redis the same app keeps its limits in Redis (a redis-server of
// the test's own).
func TestRootFixedWindowOnRedis(t *testing.T) {
	server := redistest.Start(t)
	checkRoot(t, newApp(appConfig{replica: 1, demo: defaultDemo, storage: redis.New(server.Client(t))}))
}

// checkRoot asserts the fixed window of /: 5 admitted, then a 429.
func checkRoot(t *testing.T, app *fiber.App) {
	t.Helper()
	for i := range 5 {
		resp := get(t, app, "/")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
		assert.Equal(t, "5", resp.Header.Get("X-RateLimit-Limit"), "request %d", i+1)
		assert.Equal(t, strconv.Itoa(4-i), resp.Header.Get("X-RateLimit-Remaining"), "request %d", i+1)
	}
	resp := get(t, app, "/")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "request 6")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	assert.True(t, err == nil && ra >= 1, "request 6: Retry-After %q, want whole seconds >= 1", resp.Header.Get("Retry-After"))
	assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"), "request 6")
}

func TestAPITokenBucket(t *testing.T) {
	app := memoryApp()
	for i, want := range []string{"3", "0"} {
		resp := get(t, app, "/api/expensive")
		require.Equal(t, http.StatusOK, resp.StatusCode, "expensive request %d", i+1)
		assert.Equal(t, "6", resp.Header.Get("X-RateLimit-Limit"), "expensive request %d: the burst", i+1)
		assert.Equal(t, want, resp.Header.Get("X-RateLimit-Remaining"), "expensive request %d", i+1)
	}
	resp := get(t, app, "/api/expensive")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "expensive request 3")
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	assert.True(t, err == nil && ra >= 1 && ra <= 3, "expensive request 3: Retry-After %q, want 1..3", resp.Header.Get("Retry-After"))
}

// /demo admits its limit, with every algorithm, then rejects.
func TestDemoLimit(t *testing.T) {
	for _, alg := range algorithmNames() {
		t.Run(alg, func(t *testing.T) {
			app := newApp(appConfig{replica: 1, demo: demoConfig{Limit: 3, Algorithm: alg}})
			for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
				resp := get(t, app, "/demo")
				require.Equal(t, want, resp.StatusCode, "request %d", i+1)
				assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"), "request %d", i+1)
			}
		})
	}
}

// /demo counts every client under the one key "demo": on Redis its state
// is the key that the startup message tells how to delete, and no other.
func TestDemoKeyOnRedis(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	for _, alg := range algorithmNames() {
		demo := demoConfig{Limit: 3, Algorithm: alg}
		app := newApp(appConfig{replica: 1, demo: demo, storage: redis.New(client)})
		require.Equal(t, http.StatusOK, get(t, app, "/demo").StatusCode, alg)
		keys, err := client.Keys(t.Context(), "*").Result()
		require.NoError(t, err)
		// Less the breaker's probe key, which New's probe writes for a ms.
		keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasSuffix(k, "{probe}") })
		assert.Equal(t, []string{demo.redisKey()}, keys, alg)
		require.NoError(t, client.Del(t.Context(), demo.redisKey()).Err())
	}
}

// Every response names its replica, a 429 and a 404 too.
func TestXReplica(t *testing.T) {
	app := newApp(appConfig{replica: 7, demo: demoConfig{Limit: 1, Algorithm: "fixed"}})
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/demo", http.StatusOK},
		{"/demo", http.StatusTooManyRequests},
		{"/api/cheap", http.StatusOK},
		{"/nowhere", http.StatusNotFound},
	} {
		resp := get(t, app, c.path)
		require.Equal(t, c.status, resp.StatusCode, c.path)
		assert.Equal(t, "7", resp.Header.Get("X-Replica"), c.path)
	}
}
