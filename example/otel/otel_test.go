package main

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// newTestMetrics returns Metrics on a provider read by the returned reader.
func newTestMetrics(t *testing.T) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { assert.NoError(t, provider.Shutdown(context.Background())) })
	m, err := NewMetrics(provider.Meter(meterName))
	require.NoError(t, err)
	return m, reader
}

// collect reads the named metric from reader; it fails the test if the
// metric is missing.
func collect(t *testing.T, reader sdkmetric.Reader, name string) metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				assert.Equal(t, meterName, sm.Scope.Name)
				return m
			}
		}
	}
	require.FailNow(t, "metric not collected", name)
	return metricdata.Metrics{}
}

// sums returns a monotonic int64 counter's values by attribute set,
// written out (see attrs) so that a failure shows what differs.
func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	assert.True(t, sum.IsMonotonic, m.Name)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp.Value
	}
	return out
}

// attrs writes out an attribute set as sums does:
// "http.route=/,limiter.name=flaky,...".
func attrs(kvs ...attribute.KeyValue) string {
	set := attribute.NewSet(kvs...)
	return set.Encoded(attribute.DefaultEncoder())
}

// decision is the attribute set of limiter.decisions for one outcome of a
// limiter in memory answered by its backend.
func decision(name, route, outcome string) string {
	return attrs(
		attrName.String(name),
		attrOutcome.String(outcome),
		attrAlgorithm.String("fixed_window"),
		attrBackend.String("memory"),
		attrSource.String("backend"),
		attrRoute.String(route),
	)
}

func get(t *testing.T, app *fiber.App, path string) int {
	t.Helper()
	resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, path, nil), -1)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// Eight requests against the example's limit of 5 are 5 allowed and 3
// rejected decisions of the limiter "hello", under the route's template
// (not the request's path), and 8 timed decisions.
func TestMetricsCountDecisions(t *testing.T) {
	m, reader := newTestMetrics(t)
	app := newApp(m, reader)
	codes := map[int]int{}
	for range 8 {
		codes[get(t, app, "/hello/ann")]++
	}
	require.Equal(t, map[int]int{fiber.StatusOK: 5, fiber.StatusTooManyRequests: 3}, codes)

	decisions := collect(t, reader, "limiter.decisions")
	assert.Equal(t, "{decision}", decisions.Unit)
	assert.Equal(t, map[string]int64{
		decision("hello", "/hello/:name", outcomeAllowed):  5,
		decision("hello", "/hello/:name", outcomeRejected): 3,
	}, sums(t, decisions))

	duration := collect(t, reader, "limiter.decision.duration")
	assert.Equal(t, "s", duration.Unit)
	hist, ok := duration.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "duration is a %T", duration.Data)
	require.Len(t, hist.DataPoints, 1)
	dp := hist.DataPoints[0]
	assert.Equal(t, uint64(8), dp.Count)
	assert.Equal(t, attrs(attrName.String("hello"), attrBackend.String("memory"), attrSource.String("backend")), dp.Attributes.Encoded(attribute.DefaultEncoder()))
	assert.Len(t, dp.Bounds, 13)
	assert.GreaterOrEqual(t, dp.Sum, 0.0)
	// Seconds, not nanoseconds: 8 in-memory decisions take far less than 8 s.
	assert.Less(t, dp.Sum, 8.0)

	// /metrics serves the same numbers, as JSON.
	resp, err := app.Test(httptest.NewRequest(fiber.MethodGet, "/metrics", nil), -1)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, fiber.StatusOK, resp.StatusCode)
	for _, want := range []string{`"Name": "limiter.decisions"`, `"Value": "/hello/:name"`, `"Name": "limiter.decision.duration"`, `"Count": 8`} {
		assert.Contains(t, string(body), want)
	}
}

// Each outcome is told apart: DryRun's would-be rejections are
// dry_run_rejected (and admitted), enforced ones rejected; the limiter's
// Name and the route come from the config and the matched route.
func TestMetricsOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		dryRun bool
		want   map[string]int64
	}{
		{name: "enforced", want: map[string]int64{outcomeAllowed: 2, outcomeRejected: 2}},
		{name: "dry_run", dryRun: true, want: map[string]int64{outcomeAllowed: 2, outcomeDryRunRejected: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reader := newTestMetrics(t)
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Get("/items/:id", limiter.New(limiter.Config{
				Name:       "items-" + tt.name,
				Max:        2,
				Expiration: time.Minute,
				DryRun:     tt.dryRun,
				OnDecision: m.Observe,
			}), func(c *fiber.Ctx) error { return c.SendString("ok") })
			admitted := 0
			for i := range 4 {
				if get(t, app, "/items/"+string(rune('a'+i))) == fiber.StatusOK {
					admitted++
				}
			}
			assert.Equal(t, map[bool]int{true: 4, false: 2}[tt.dryRun], admitted)
			want := map[string]int64{}
			for outcome, n := range tt.want {
				want[decision("items-"+tt.name, "/items/:id", outcome)] = n
			}
			assert.Equal(t, want, sums(t, collect(t, reader, "limiter.decisions")))
		})
	}
}

// failingStorage is a fiber.Storage whose every call fails, as a store
// that is out of reach does.
type failingStorage struct{}

var errStorageDown = errors.New("storage down")

func (failingStorage) Get(string) ([]byte, error)              { return nil, errStorageDown }
func (failingStorage) Set(string, []byte, time.Duration) error { return errStorageDown }
func (failingStorage) Delete(string) error                     { return errStorageDown }
func (failingStorage) Reset() error                            { return errStorageDown }
func (failingStorage) Close() error                            { return nil }

// A Storage that fails reaches limiter.storage.errors through
// OnStorageError (the first failure at once), and, under FailOpen, the
// request is admitted with source fail_open.
func TestMetricsCountStorageErrors(t *testing.T) {
	m, reader := newTestMetrics(t)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/", limiter.New(limiter.Config{
		Name:           "flaky",
		Storage:        failingStorage{},
		FailurePolicy:  limiter.FailOpen,
		OnDecision:     m.Observe,
		OnStorageError: m.StorageError,
	}), func(c *fiber.Ctx) error { return c.SendString("ok") })
	require.Equal(t, fiber.StatusOK, get(t, app, "/"))

	failure := attrs(attrKind.String("failure"), attrBreaker.Bool(false))
	assert.Equal(t, map[string]int64{failure: 1}, sums(t, collect(t, reader, "limiter.storage.errors")))
	failOpen := attrs(
		attrName.String("flaky"),
		attrOutcome.String(outcomeAllowed),
		attrAlgorithm.String("fixed_window"),
		attrBackend.String("storage"),
		attrSource.String("fail_open"),
		attrRoute.String("/"),
	)
	assert.Equal(t, map[string]int64{failOpen: 1}, sums(t, collect(t, reader, "limiter.decisions")))
}

// StorageError adds a report's number of failed calls, and 1 for a
// warning or any other error.
func TestStorageErrorHook(t *testing.T) {
	failure := func(open bool) string { return attrs(attrKind.String("failure"), attrBreaker.Bool(open)) }
	warning := attrs(attrKind.String("warning"), attrBreaker.Bool(false))
	tests := []struct {
		name string
		errs []error
		want map[string]int64
	}{
		{
			name: "failures",
			errs: []error{&limiter.StorageError{Err: errStorageDown, Failures: 1}, &limiter.StorageError{Err: errStorageDown, Failures: 40}},
			want: map[string]int64{failure(false): 41},
		},
		{
			name: "breaker open",
			errs: []error{&limiter.StorageError{Err: errStorageDown, Failures: 7, BreakerOpen: true}},
			want: map[string]int64{failure(true): 7},
		},
		{
			name: "warnings",
			errs: []error{&limiter.StorageError{Err: limiter.ErrStorageEvicts}, errors.New("other")},
			want: map[string]int64{warning: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reader := newTestMetrics(t)
			for _, err := range tt.errs {
				m.StorageError(err)
			}
			assert.Equal(t, tt.want, sums(t, collect(t, reader, "limiter.storage.errors")))
		})
	}
}
