package main

import (
	"strconv"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics turns the limiter's decisions into Prometheus metrics: a counter
// of decisions by outcome, and a histogram of how long they took.
type Metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

// NewMetrics registers the metrics with reg:
//
//	limiter_decisions_total{algorithm, backend, source, allowed, dry_run}
//	limiter_decision_duration_seconds{backend, source}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limiter_decisions_total",
			Help: "Rate-limit decisions, by algorithm, backend, what answered (source), and whether the request was admitted.",
		}, []string{"algorithm", "backend", "source", "allowed", "dry_run"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "limiter_decision_duration_seconds",
			Help: "Time the limiter took to decide, from the call to its backend to the answer.",
			// 10 µs (in memory) to 100 ms (the default StorageTimeout),
			// in steps of 1, 2.5, 5 per decade, so that the le labels
			// read as written.
			Buckets: []float64{
				0.00001, 0.000025, 0.00005,
				0.0001, 0.00025, 0.0005,
				0.001, 0.0025, 0.005,
				0.01, 0.025, 0.05,
				0.1,
			},
		}, []string{"backend", "source"}),
	}
	reg.MustRegister(m.decisions, m.latency)
	return m
}

// Observe is a limiter.Config.OnDecision hook.
func (m *Metrics) Observe(_ *fiber.Ctx, e limiter.DecisionEvent) {
	source := e.Source.String()
	m.decisions.WithLabelValues(e.Algorithm, e.Backend, source, strconv.FormatBool(e.Allowed), strconv.FormatBool(e.DryRun)).Inc()
	m.latency.WithLabelValues(e.Backend, source).Observe(e.Latency.Seconds())
}
