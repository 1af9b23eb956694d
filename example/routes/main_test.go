package main

import (
	"net/http"
	"testing"

	"github.com/fiberlimit/limiter/internal/readmecheck"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
)

// README shows this program as it is, and what it answers to curl: in
// memory, and on Redis with the requests dealt in turn to two replicas
// sharing it.
func TestREADME(t *testing.T) {
	readmecheck.ShowsFile(t, "README.md", "example/routes/main.go", "main.go")

	t.Run("memory", func(t *testing.T) {
		app := newApp(nil)
		readmecheck.ReplayTranscript(t, "README.md", "example/routes", func(r *http.Request) (*http.Response, error) { return app.Test(r, -1) })
	})
	t.Run("two replicas on Redis", func(t *testing.T) {
		server := redistest.Start(t)
		apps := []*fiber.App{newApp(redis.New(server.Client(t))), newApp(redis.New(server.Client(t)))}
		sent := 0
		readmecheck.ReplayTranscript(t, "README.md", "example/routes", func(r *http.Request) (*http.Response, error) {
			sent++
			return apps[sent%2].Test(r, -1)
		})
	})
}
