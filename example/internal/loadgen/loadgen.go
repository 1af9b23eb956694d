// Package loadgen sends HTTP GET requests round-robin to several targets
// from concurrent workers and reports, per target and in total, how many
// were admitted (200), rejected (429) or answered otherwise, with a latency
// summary. It is the logic of the example/loadgen command, kept importable
// so that the example's tests can run it against in-process replicas.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Run: ErrOptions wraps every complaint about Options, and
// ErrAllFailed is returned when no request got an HTTP response.
var (
	ErrOptions   = errors.New("loadgen: invalid options")
	ErrAllFailed = errors.New("loadgen: every request failed")
)

// Options says what Run sends.
type Options struct {
	// Targets are base URLs (scheme and host, optionally a path prefix);
	// request i goes to Targets[i % len(Targets)].
	Targets []string
	// Path is appended to each target, e.g. "/demo".
	Path string
	// Requests is how many requests to send in all (at least 1).
	Requests int
	// Concurrency is how many workers send at once (at least 1).
	Concurrency int
	// Timeout bounds each request; 0 means 10 seconds.
	Timeout time.Duration
}

// defaultTimeout is the per-request timeout when Options.Timeout is 0.
const defaultTimeout = 10 * time.Second

// outcome is what one request got: a status code, or err on a transport
// failure, and how long it took.
type outcome struct {
	status  int
	replica string // the X-Replica header, if any
	latency time.Duration
	err     error
}

// Run sends the requests, writes the report to w and returns it. It
// returns an error wrapping ErrOptions for invalid options (sending
// nothing), an error for a failed write to w, and ErrAllFailed (after
// writing the report) when no request got a response.
func Run(ctx context.Context, w io.Writer, opts Options) (*Report, error) {
	bases, path, err := opts.targets()
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	// Keep-alive, with an idle pool large enough that no worker has to
	// dial again after its first request to a target.
	transport := &http.Transport{
		MaxIdleConns:        opts.Concurrency * len(bases),
		MaxIdleConnsPerHost: opts.Concurrency,
		IdleConnTimeout:     30 * time.Second,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: timeout}

	outcomes := make([]outcome, opts.Requests)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(opts.Concurrency, opts.Requests) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= opts.Requests {
					return
				}
				outcomes[i] = send(ctx, client, bases[i%len(bases)]+path)
			}
		}()
	}
	wg.Wait()

	report := newReport(opts, bases, path, outcomes, time.Since(start))
	if err := report.Write(w); err != nil {
		return report, fmt.Errorf("loadgen: write report: %w", err)
	}
	if report.Total.Errors == opts.Requests {
		return report, ErrAllFailed
	}
	return report, nil
}

// send makes one GET request and reads its body to the end, so that the
// connection goes back to the pool.
func send(ctx context.Context, client *http.Client, u string) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return outcome{err: fmt.Errorf("loadgen: new request: %w", err)}
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return outcome{err: err, latency: time.Since(start)}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	latency := time.Since(start)
	if err != nil {
		return outcome{err: fmt.Errorf("loadgen: read body: %w", err), latency: latency}
	}
	return outcome{status: resp.StatusCode, replica: resp.Header.Get("X-Replica"), latency: latency}
}

// targets checks the options and returns the base URL of each target,
// without a trailing slash, and the path to append, starting with a slash.
func (o Options) targets() (bases []string, path string, err error) {
	switch {
	case len(o.Targets) == 0:
		return nil, "", fmt.Errorf("%w: no targets", ErrOptions)
	case o.Requests < 1:
		return nil, "", fmt.Errorf("%w: requests %d, want at least 1", ErrOptions, o.Requests)
	case o.Concurrency < 1:
		return nil, "", fmt.Errorf("%w: concurrency %d, want at least 1", ErrOptions, o.Concurrency)
	case o.Timeout < 0:
		return nil, "", fmt.Errorf("%w: timeout %v, want 0 or more", ErrOptions, o.Timeout)
	}
	bases = make([]string, len(o.Targets))
	for i, t := range o.Targets {
		u, err := url.Parse(strings.TrimSpace(t))
		if err != nil {
			return nil, "", fmt.Errorf("%w: target %q: %w", ErrOptions, t, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			return nil, "", fmt.Errorf("%w: target %q: want http://host:port or https://host:port", ErrOptions, t)
		}
		bases[i] = strings.TrimSuffix(u.String(), "/")
	}
	return bases, "/" + strings.TrimPrefix(o.Path, "/"), nil
}
