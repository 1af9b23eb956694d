// Command example is a small Fiber app rate-limited by
// github.com/fiberlimit/limiter, with the in-memory store by default or a
// Redis shared by every replica. It can serve several replicas of the app in
// one process, each with its own limiters and its own Redis client, as
// separate processes would have, to show that replicas sharing one Redis
// admit exactly the limit together.
//
// Run it from the repository root and follow the commands it prints:
//
//	go run ./example                     # serves http://127.0.0.1:3000
//	go run ./example -addr 127.0.0.1:8080
//	go run ./example -redis redis://127.0.0.1:6379/0
//
// Three replicas on 127.0.0.1:3000, :3001 and :3002 sharing one Redis, and,
// in another terminal, 1200 requests to GET /demo spread round-robin over
// them by the load generator (example/loadgen), which prints how many each
// replica admitted and rejected: 1000 admitted in total.
//
//	go run ./example -replicas 3 -redis redis://127.0.0.1:6379/0
//	go run ./example/loadgen -n 1200 -c 32 -path /demo \
//	    -targets http://127.0.0.1:3000,http://127.0.0.1:3001,http://127.0.0.1:3002
//
// Without -redis each replica limits in its own memory, and the same run
// admits 1200: each replica's 400, under its own quota of 1000.
//
// Flags: -replicas N (default 1), -addr host:port of replica 1 (default
// 127.0.0.1:3000; replica N listens on the port N-1 above it), -redis URL,
// -algorithm fixed|sliding|token and -demo-limit N for GET /demo (default
// fixed, 1000). With -redis, every replica pings Redis at start, and the
// command exits with an error when Redis does not answer.
//
// Routes (every response names its replica in the X-Replica header):
//
//	GET /               fixed window: 5 requests per 10 seconds per client IP
//	GET /api/cheap      token bucket: burst of 6, refills 1 token per second; cost 1
//	GET /api/expensive  the same bucket; cost 3
//	GET /demo           fixed window: 1000 requests per hour, one quota for
//	                    all clients (every request counts under the key "demo")
//
// Stop it with Ctrl+C (SIGINT) or SIGTERM; in-flight requests finish first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// run parses args, starts the replicas, prints the startup message to
// stdout and serves until ctx is done or a replica stops on its own; then
// it shuts every replica down. Storage failures are logged to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	set, err := startReplicas(ctx, opts, stderr)
	if err != nil {
		return err
	}
	printUsage(stdout, set.urls(), set.redis, opts.demo)

	select {
	case err = <-set.stopped:
	case <-ctx.Done():
		_, _ = fmt.Fprintln(stdout, "shutting down") // a notice, as printUsage's: best effort
	}
	return errors.Join(err, set.shutdown())
}
