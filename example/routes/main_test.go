package main

import (
	"net/http"
	"os"
	"testing"

	"github.com/fiberlimit/limiter/internal/readmecheck"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
)

// README shows this program as it is.
func TestREADMEShowsThisProgram(t *testing.T) {
	file, err := os.ReadFile("main.go")
	require.NoError(t, err)
	require.Equal(t, string(file), readmecheck.Block(t, "README.md", "file: example/routes/main.go"))
}

// README's transcript is what the program answers, in memory, and on Redis
// with the requests dealt in turn to two replicas sharing it.
func TestREADMETranscript(t *testing.T) {
	exchanges, err := readmecheck.Transcript(readmecheck.Block(t, "README.md", "transcript: example/routes"))
	require.NoError(t, err)
	require.NotEmpty(t, exchanges)

	t.Run("memory", func(t *testing.T) {
		app := newApp(nil)
		readmecheck.Replay(t, func(r *http.Request) (*http.Response, error) { return app.Test(r, -1) }, exchanges)
	})
	t.Run("two replicas on Redis", func(t *testing.T) {
		server := redistest.Start(t)
		apps := []*fiber.App{newApp(redis.New(server.Client(t))), newApp(redis.New(server.Client(t)))}
		sent := 0
		readmecheck.Replay(t, func(r *http.Request) (*http.Response, error) {
			sent++
			return apps[sent%2].Test(r, -1)
		}, exchanges)
	})
}
