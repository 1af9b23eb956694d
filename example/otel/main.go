// Command otel serves a rate-limited Fiber app whose limiter reports every
// decision, and every storage failure, to OpenTelemetry metrics through
// Config.OnDecision and Config.OnStorageError (see metrics.go). It is a
// module of its own, so that the limiter does not depend on OpenTelemetry.
//
// The MeterProvider here has no exporter: a ManualReader, which /metrics
// collects and prints as JSON, so that the example runs with nothing else
// installed. In production, give the provider a PeriodicReader over the
// exporter of your collector (OTLP, say, from
// go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp) in its
// place; NewMetrics and the hooks stay the same.
//
//	cd example/otel && go run .
//	for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/hello/ann; done
//	curl -s http://127.0.0.1:3000/metrics
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// meterName names the instrumentation scope of the limiter's metrics.
const meterName = "github.com/fiberlimit/limiter/example/otel"

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "address to listen on")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "otel example:", err)
		os.Exit(1)
	}
}

// run serves on addr until the listener fails, then shuts the provider down.
func run(addr string) error {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = provider.Shutdown(context.Background()) }()
	m, err := NewMetrics(provider.Meter(meterName))
	if err != nil {
		return err
	}
	app := newApp(m, reader)
	fmt.Printf("serving on http://%s: /hello/:name is limited to 5 requests per 10 s per client, /metrics has the counts\n", addr)
	return app.Listen(addr)
}

// newApp serves /hello/:name behind a limiter named "hello" that reports to
// m, and reader's metrics as JSON at /metrics (not limited).
func newApp(m *Metrics, reader sdkmetric.Reader) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/metrics", func(c *fiber.Ctx) error {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(c.UserContext(), &rm); err != nil {
			return fmt.Errorf("limiter: otel example: collect: %w", err)
		}
		body, err := json.MarshalIndent(rm, "", "  ")
		if err != nil {
			return fmt.Errorf("limiter: otel example: encode: %w", err)
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(body)
	})
	hello := limiter.New(limiter.Config{
		Name:           "hello",
		Max:            5,
		Expiration:     10 * time.Second,
		OnDecision:     m.Observe,
		OnStorageError: m.StorageError,
	})
	app.Get("/hello/:name", hello, func(c *fiber.Ctx) error {
		return c.SendString("hello, " + c.Params("name") + "\n")
	})
	return app
}
