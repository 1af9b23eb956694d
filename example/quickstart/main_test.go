package main

import (
	"net/http"
	"os"
	"testing"

	"github.com/fiberlimit/limiter/internal/readmecheck"
	"github.com/stretchr/testify/require"
)

// README shows this program as it is.
func TestREADMEShowsThisProgram(t *testing.T) {
	file, err := os.ReadFile("main.go")
	require.NoError(t, err)
	require.Equal(t, string(file), readmecheck.Block(t, "README.md", "file: example/quickstart/main.go"))
}

// README's transcript of curl against this program is what it answers.
func TestREADMETranscript(t *testing.T) {
	exchanges, err := readmecheck.Transcript(readmecheck.Block(t, "README.md", "transcript: example/quickstart"))
	require.NoError(t, err)
	require.NotEmpty(t, exchanges)
	app := newApp()
	readmecheck.Replay(t, func(r *http.Request) (*http.Response, error) { return app.Test(r, -1) }, exchanges)
}
