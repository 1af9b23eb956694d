package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of the limiter's metrics. http.route is OpenTelemetry's
// semantic-convention name for a route template ("/hello/:name").
const (
	attrName      = attribute.Key("limiter.name")
	attrOutcome   = attribute.Key("limiter.outcome")
	attrAlgorithm = attribute.Key("limiter.algorithm")
	attrBackend   = attribute.Key("limiter.backend")
	attrSource    = attribute.Key("limiter.source")
	attrRoute     = attribute.Key("http.route")
	attrKind      = attribute.Key("limiter.storage.error.kind")
	attrBreaker   = attribute.Key("limiter.breaker.open")
)

// The values of attrOutcome.
const (
	outcomeAllowed        = "allowed"
	outcomeRejected       = "rejected"
	outcomeDryRunRejected = "dry_run_rejected" // DryRun: would have been rejected, went on
)

// Metrics turns the limiter's decisions and storage failures into
// OpenTelemetry instruments of one metric.Meter:
//
//	limiter.decisions          counter {decision}: limiter.name, limiter.outcome,
//	                           limiter.algorithm, limiter.backend, limiter.source, http.route
//	limiter.decision.duration  histogram, s: limiter.name, limiter.backend, limiter.source
//	limiter.storage.errors     counter {error}: limiter.storage.error.kind
//	                           ("failure" or "warning"), limiter.breaker.open
type Metrics struct {
	decisions     metric.Int64Counter
	duration      metric.Float64Histogram
	storageErrors metric.Int64Counter
}

// NewMetrics creates the instruments on meter; it fails only if meter
// refuses one (an invalid name or unit).
func NewMetrics(meter metric.Meter) (*Metrics, error) {
	decisions, err := meter.Int64Counter("limiter.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by limiter, outcome, algorithm, backend, what answered (source) and route."))
	if err != nil {
		return nil, fmt.Errorf("limiter: otel example: %w", err)
	}
	duration, err := meter.Float64Histogram("limiter.decision.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time the limiter took to decide, from the call to its backend to the answer."),
		// 10 µs (in memory) to 100 ms (the default StorageTimeout), in
		// steps of 1, 2.5, 5 per decade.
		metric.WithExplicitBucketBoundaries(
			0.00001, 0.000025, 0.00005,
			0.0001, 0.00025, 0.0005,
			0.001, 0.0025, 0.005,
			0.01, 0.025, 0.05,
			0.1,
		))
	if err != nil {
		return nil, fmt.Errorf("limiter: otel example: %w", err)
	}
	storageErrors, err := meter.Int64Counter("limiter.storage.errors",
		metric.WithUnit("{error}"),
		metric.WithDescription("Failed Storage calls (kind failure), and warnings about the Storage's settings (kind warning)."))
	if err != nil {
		return nil, fmt.Errorf("limiter: otel example: %w", err)
	}
	return &Metrics{decisions: decisions, duration: duration, storageErrors: storageErrors}, nil
}

// Observe is a limiter.Config.OnDecision hook. The route is the matched
// route's template (c.Route().Path), not the request's path, so that the
// attribute's values stay few.
func (m *Metrics) Observe(c *fiber.Ctx, e limiter.DecisionEvent) {
	outcome := outcomeAllowed
	switch {
	case !e.Allowed && e.DryRun:
		outcome = outcomeDryRunRejected
	case !e.Allowed:
		outcome = outcomeRejected
	}
	source := e.Source.String()
	ctx := context.Background()
	if c != nil {
		ctx = c.UserContext()
	}
	m.decisions.Add(ctx, 1, metric.WithAttributes(
		attrName.String(e.Name),
		attrOutcome.String(outcome),
		attrAlgorithm.String(e.Algorithm),
		attrBackend.String(e.Backend),
		attrSource.String(source),
		attrRoute.String(route(c)),
	))
	m.duration.Record(ctx, e.Latency.Seconds(), metric.WithAttributes(
		attrName.String(e.Name),
		attrBackend.String(e.Backend),
		attrSource.String(source),
	))
}

// StorageError is a limiter.Config.OnStorageError hook. A report of
// failures (a *limiter.StorageError with Failures above 0) adds its number
// of failed calls, since the limiter reports at most once a second; any
// other error, a warning, adds 1.
func (m *Metrics) StorageError(err error) {
	var se *limiter.StorageError
	if errors.As(err, &se) && se.Failures > 0 {
		m.storageErrors.Add(context.Background(), int64(se.Failures), metric.WithAttributes(
			attrKind.String("failure"), attrBreaker.Bool(se.BreakerOpen)))
		return
	}
	breakerOpen := se != nil && se.BreakerOpen
	m.storageErrors.Add(context.Background(), 1, metric.WithAttributes(
		attrKind.String("warning"), attrBreaker.Bool(breakerOpen)))
}

// route is c's matched route template, or "" without one.
func route(c *fiber.Ctx) string {
	if c == nil {
		return ""
	}
	if r := c.Route(); r != nil {
		return r.Path
	}
	return ""
}
