package main

import (
	"net/http"
	"testing"

	"github.com/fiberlimit/limiter/internal/readmecheck"
)

// README shows this program as it is, and what it answers to curl.
func TestREADME(t *testing.T) {
	readmecheck.ShowsFile(t, "README.md", "example/quickstart/main.go", "main.go")
	app := newApp()
	readmecheck.ReplayTranscript(t, "README.md", "example/quickstart", func(r *http.Request) (*http.Response, error) { return app.Test(r, -1) })
}
