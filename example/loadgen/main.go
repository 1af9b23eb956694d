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
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fiberlimit/limiter/example/internal/loadgen"
)

// parseFlags reads the command line (without the program name) into the
// load generator's options; -targets is split at commas, blanks dropped.
// An error is flag.ErrHelp for -h, or says what is wrong; the flag package
// has written the usage to stderr.
func parseFlags(args []string, stderr io.Writer) (loadgen.Options, error) {
	var opts loadgen.Options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	targets := fs.String("targets", "http://127.0.0.1:3000", "comma-separated base URLs; request i goes to target i mod len(targets)")
	fs.StringVar(&opts.Path, "path", "/demo", "path to GET on every target")
	fs.IntVar(&opts.Requests, "n", 1200, "number of requests in all")
	fs.IntVar(&opts.Concurrency, "c", 32, "number of concurrent workers")
	fs.DurationVar(&opts.Timeout, "timeout", 0, "timeout of each request (0: 10s)")
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("loadgen: unexpected arguments %q", fs.Args())
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			opts.Targets = append(opts.Targets, t)
		}
	}
	return opts, nil
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = loadgen.Run(ctx, os.Stdout, opts)
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
