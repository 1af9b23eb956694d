package main

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Eight requests against a limit of 5 show up as 5 admitted and 3 rejected
// decisions, each timed, and /metrics serves them.
func TestMetricsCountDecisions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	app := newApp(m, reg)
	for range 8 {
		resp, err := app.Test(httptest.NewRequest("GET", "/", nil), -1)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	labels := func(allowed string) []string { return []string{"fixed_window", "memory", "backend", allowed, "false"} }
	assert.Equal(t, 5.0, testutil.ToFloat64(m.decisions.WithLabelValues(labels("true")...)))
	assert.Equal(t, 3.0, testutil.ToFloat64(m.decisions.WithLabelValues(labels("false")...)))
	assert.Equal(t, 1, testutil.CollectAndCount(m.latency), "one latency series: memory, backend")

	resp, err := app.Test(httptest.NewRequest("GET", "/metrics", nil), -1)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Contains(t, string(body), `limiter_decisions_total{algorithm="fixed_window",allowed="false",backend="memory",dry_run="false",source="backend"} 3`)
	assert.True(t, strings.Contains(string(body), `limiter_decision_duration_seconds_count{backend="memory",source="backend"} 8`), "%s", body)
	// Bucket bounds print as written: le="2.5e-05", not a long fraction.
	for _, le := range []string{`le="1e-05"`, `le="2.5e-05"`, `le="0.00025"`, `le="0.1"`, `le="+Inf"`} {
		assert.Contains(t, string(body), le)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.Index(line, `le="`); i >= 0 {
			le := line[i+len(`le="`):]
			le = le[:strings.IndexByte(le, '"')]
			assert.LessOrEqual(t, len(le), 7, "bucket bound %s", le)
		}
	}
}
