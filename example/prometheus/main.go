// Command prometheus serves a rate-limited Fiber app whose limiter reports
// every decision to Prometheus through Config.OnDecision, and the metrics
// at /metrics. It is a module of its own, so that the limiter does not
// depend on Prometheus.
//
//	cd example/prometheus && go run .
//	for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//	curl -s http://127.0.0.1:3000/metrics | grep ^limiter_
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3000", "address to listen on")
	flag.Parse()
	reg := prometheus.NewRegistry()
	app := newApp(NewMetrics(reg), reg)
	fmt.Printf("serving on http://%s: / is limited to 5 requests per 10 s per client, /metrics has the counts\n", *addr)
	if err := app.Listen(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus example:", err)
		os.Exit(1)
	}
}

// newApp serves / behind a limiter that reports to m, and reg's metrics at
// /metrics (not limited).
func newApp(m *Metrics, reg *prometheus.Registry) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	app.Use(limiter.New(limiter.Config{
		Max:        5,
		Expiration: 10 * time.Second,
		OnDecision: m.Observe,
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok\n") })
	return app
}
