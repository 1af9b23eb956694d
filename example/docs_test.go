package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/fiberlimit/limiter/internal/readmecheck"
	"github.com/stretchr/testify/require"
)

// docs/example.md shows what go run ./example prints at start, up to its
// "...".
func TestDocsShowTheStartupMessage(t *testing.T) {
	block := readmecheck.Block(t, "docs/example.md", "output: go run ./example")
	shown, ok := strings.CutPrefix(block, "$ go run ./example\n")
	require.True(t, ok, "the block begins with the command")
	shown, ok = strings.CutSuffix(shown, "...\n")
	require.True(t, ok, "the block ends with ...")

	out, _, err := runOnce(t)
	require.NoError(t, err)
	// runOnce listens on a free port; the docs show the default one.
	out = regexp.MustCompile(`127\.0\.0\.1:\d+`).ReplaceAllString(out, "127.0.0.1:3000")
	require.True(t, strings.HasPrefix(out, shown), "the command prints:\n%s\nthe docs show:\n%s", out, shown)
}

// docs/example.md's curl transcripts are what the app answers.
func TestDocsTranscripts(t *testing.T) {
	for _, name := range []string{"example /", "example /api"} {
		t.Run(name, func(t *testing.T) {
			app := memoryApp()
			readmecheck.ReplayTranscript(t, "docs/example.md", name, func(r *http.Request) (*http.Response, error) { return app.Test(r, -1) })
		})
	}
}
