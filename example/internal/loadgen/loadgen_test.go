package loadgen

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quotaServer admits its first quota requests to path with 200 and
// rejects the rest with 429, naming itself in X-Replica.
func quotaServer(t *testing.T, replica string, quota int64, path string) *httptest.Server {
	t.Helper()
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Replica", replica)
		switch {
		case r.URL.Path != path:
			w.WriteHeader(http.StatusNotFound)
		case served.Add(1) <= quota:
			_, _ = w.Write([]byte("ok\n"))
		default:
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	return u
}

// fields are the columns of the table row whose first column is first.
func fields(t *testing.T, out, first string) []string {
	t.Helper()
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no row %q in:\n%s", first, out)
	return nil
}

// Requests go round-robin, and each target's outcomes are counted apart.
func TestRunCounts(t *testing.T) {
	a := quotaServer(t, "1", 10, "/demo")
	b := quotaServer(t, "2", 100, "/demo")
	var out bytes.Buffer
	report, err := Run(t.Context(), &out, Options{
		Targets: []string{a.URL, b.URL + "/"}, Path: "demo", Requests: 61, Concurrency: 8,
	})
	require.NoError(t, err)
	t.Log(out.String())

	assert.Equal(t, Counts{Target: a.URL, Replica: "1", Admitted: 10, Rejected: 21}, report.Targets[0])
	assert.Equal(t, Counts{Target: b.URL, Replica: "2", Admitted: 30}, report.Targets[1])
	assert.Equal(t, Counts{Target: "total", Replica: "-", Admitted: 40, Rejected: 21}, report.Total)
	assert.Equal(t, []string{a.URL, "1", "10", "21", "0", "0"}, fields(t, out.String(), a.URL))
	assert.Equal(t, []string{b.URL, "2", "30", "0", "0", "0"}, fields(t, out.String(), b.URL))
	assert.Equal(t, []string{"total", "-", "40", "21", "0", "0"}, fields(t, out.String(), "total"))
	assert.Contains(t, out.String(), "GET /demo: 61 requests round-robin over 2 targets, 8 workers, ")

	l := report.Latency
	assert.Equal(t, 61, l.Responses)
	assert.True(t, l.Min > 0 && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max, "%+v", l)
	assert.Contains(t, out.String(), "latency over 61 responses: min ")
}

// Other statuses and transport errors are counted and shown; the run
// succeeds while any request got a response.
func TestRunOtherAndErrors(t *testing.T) {
	srv := quotaServer(t, "1", 100, "/demo")
	down := closedURL(t)
	var out bytes.Buffer
	report, err := Run(t.Context(), &out, Options{
		Targets: []string{srv.URL, down}, Path: "/elsewhere", Requests: 10, Concurrency: 3,
	})
	require.NoError(t, err)
	assert.Equal(t, Counts{Target: srv.URL, Replica: "1", Other: 5}, report.Targets[0])
	assert.Equal(t, Counts{Target: down, Replica: "-", Errors: 5}, report.Targets[1])
	assert.Equal(t, map[int]int{http.StatusNotFound: 5}, report.OtherStatuses)
	assert.Contains(t, out.String(), "other statuses: 404 ×5")
	assert.Contains(t, out.String(), "5 requests got no response; the first: ")
	assert.Equal(t, 5, report.Latency.Responses)
}

// With no response at all, Run writes the report and says so.
func TestRunAllFailed(t *testing.T) {
	var out bytes.Buffer
	report, err := Run(t.Context(), &out, Options{
		Targets: []string{closedURL(t)}, Path: "/", Requests: 4, Concurrency: 2, Timeout: time.Second,
	})
	require.ErrorIs(t, err, ErrAllFailed)
	assert.Equal(t, 4, report.Total.Errors)
	assert.Contains(t, out.String(), "latency: no responses")
}

// A server that answers with several X-Replica values is "mixed".
func TestRunMixedReplica(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Replica", []string{"1", "2"}[n.Add(1)%2])
	}))
	defer srv.Close()
	report, err := Run(t.Context(), &bytes.Buffer{}, Options{Targets: []string{srv.URL}, Requests: 4, Concurrency: 1})
	require.NoError(t, err)
	assert.Equal(t, "mixed", report.Targets[0].Replica)
}

func TestRunBadOptions(t *testing.T) {
	ok := Options{Targets: []string{"http://127.0.0.1:1"}, Requests: 1, Concurrency: 1}
	for name, change := range map[string]func(*Options){
		"no targets":  func(o *Options) { o.Targets = nil },
		"requests":    func(o *Options) { o.Requests = 0 },
		"concurrency": func(o *Options) { o.Concurrency = 0 },
		"timeout":     func(o *Options) { o.Timeout = -time.Second },
		"scheme":      func(o *Options) { o.Targets = []string{"ftp://127.0.0.1:1"} },
		"no host":     func(o *Options) { o.Targets = []string{"127.0.0.1:3000"} },
		"bad url":     func(o *Options) { o.Targets = []string{"http://[::1"} },
	} {
		opts := ok
		change(&opts)
		var out bytes.Buffer
		_, err := Run(t.Context(), &out, opts)
		assert.ErrorIs(t, err, ErrOptions, name)
		assert.Empty(t, out.String(), name)
	}
}

// The summary takes nearest ranks.
func TestSummarize(t *testing.T) {
	var ls []time.Duration
	for i := 100; i >= 1; i-- {
		ls = append(ls, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, Latency{
		Responses: 100,
		Min:       time.Millisecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond,
		P99: 99 * time.Millisecond, Max: 100 * time.Millisecond,
	}, summarize(ls))
	assert.Equal(t, Latency{Responses: 1, Min: 7, P50: 7, P90: 7, P99: 7, Max: 7}, summarize([]time.Duration{7}))
	assert.Equal(t, Latency{}, summarize(nil))
}
