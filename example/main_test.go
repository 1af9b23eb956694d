package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
)

// get sends GET path to app and returns the response, its body closed.
func get(t *testing.T, app *fiber.App, path string) *http.Response {
	t.Helper()
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, path, nil), -1)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

func TestRootFixedWindow(t *testing.T) {
	checkRoot(t, newApp(nil))
}

// With -redis the same app keeps its limits in Redis (a redis-server of
// the test's own).
func TestRootFixedWindowOnRedis(t *testing.T) {
	server := redistest.Start(t)
	checkRoot(t, newApp(redis.New(server.Client(t))))
}

// checkRoot asserts the fixed window of /: 5 admitted, then a 429.
func checkRoot(t *testing.T, app *fiber.App) {
	t.Helper()
	for i := range 5 {
		resp := get(t, app, "/")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i+1, resp.StatusCode)
		}
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "5" {
			t.Errorf("request %d: X-RateLimit-Limit %q, want \"5\"", i+1, got)
		}
		if got, want := resp.Header.Get("X-RateLimit-Remaining"), strconv.Itoa(4-i); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
		}
	}
	resp := get(t, app, "/")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 6: status %d, want 429", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("request 6: Retry-After %q, want whole seconds >= 1", resp.Header.Get("Retry-After"))
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("request 6: X-RateLimit-Remaining %q, want \"0\"", got)
	}
}

func TestAPITokenBucket(t *testing.T) {
	app := newApp(nil)
	for i, want := range []string{"3", "0"} {
		resp := get(t, app, "/api/expensive")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("expensive request %d: status %d, want 200", i+1, resp.StatusCode)
		}
		if got := resp.Header.Get("X-RateLimit-Limit"); got != "6" {
			t.Errorf("expensive request %d: X-RateLimit-Limit %q, want \"6\" (the burst)", i+1, got)
		}
		if got := resp.Header.Get("X-RateLimit-Remaining"); got != want {
			t.Errorf("expensive request %d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
		}
	}
	resp := get(t, app, "/api/expensive")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("expensive request 3: status %d, want 429", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 3 {
		t.Errorf("expensive request 3: Retry-After %q, want 1..3", resp.Header.Get("Retry-After"))
	}
}
