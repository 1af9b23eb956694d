// Command loadgen sends GET requests round-robin to several replicas of the
// example app and prints how many each admitted (200) and rejected (429),
// the totals, and a latency summary. Start the replicas first (see the
// example's package doc), then, from the repository root:
//
//	go run ./example/loadgen -n 1200 -c 32 -path /demo \
//	    -targets http://127.0.0.1:3000,http://127.0.0.1:3001,http://127.0.0.1:3002
//
// It exits with status 1 when no request got a response, and 2 on bad
// flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fiberlimit/limiter/example/internal/loadgen"
)

func main() {
	var opts loadgen.Options
	targets := flag.String("targets", "http://127.0.0.1:3000", "comma-separated base URLs; request i goes to target i mod len(targets)")
	flag.StringVar(&opts.Path, "path", "/demo", "path to GET on every target")
	flag.IntVar(&opts.Requests, "n", 1200, "number of requests in all")
	flag.IntVar(&opts.Concurrency, "c", 32, "number of concurrent workers")
	flag.DurationVar(&opts.Timeout, "timeout", 0, "timeout of each request (0: 10s)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "loadgen: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			opts.Targets = append(opts.Targets, t)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := loadgen.Run(ctx, os.Stdout, opts)
	switch {
	case err == nil:
	case errors.Is(err, loadgen.ErrAllFailed):
		fmt.Fprintln(os.Stderr, "loadgen: no request got a response; are the replicas running?")
		os.Exit(1)
	case errors.Is(err, loadgen.ErrOptions):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
