package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// errUsage marks an error in the command line, for exit status 2.
var errUsage = errors.New("usage")

// maxReplicas bounds -replicas.
const maxReplicas = 64

// defaultStorageTimeout is -storage-timeout's default: ten times the
// library's 100 ms, so that the shared count of the demo stays exact on a
// loaded laptop, where a Redis call now and then takes longer than 100 ms
// and would be decided by the replica's own in-memory fallback.
const defaultStorageTimeout = time.Second

// options are the command's flags.
type options struct {
	addr     string
	replicas int
	redisURL string
	demo     demoConfig
	// storageTimeout is the limiters' StorageTimeout (-storage-timeout).
	storageTimeout time.Duration
}

// parseOptions parses args (without the program name). Errors wrap
// errUsage, or flag.ErrHelp for -h; the flag package has then printed the
// usage to stderr.
func parseOptions(args []string, stderr io.Writer) (options, error) {
	opts := options{demo: defaultDemo, storageTimeout: defaultStorageTimeout}
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.addr, "addr", "127.0.0.1:3000", "address of replica 1; replica N listens on the port N-1 above it (port 0: a free port each)")
	fs.IntVar(&opts.replicas, "replicas", 1, fmt.Sprintf("number of replicas (apps, each with its own limiters and Redis client) to serve, 1 to %d", maxReplicas))
	fs.StringVar(&opts.redisURL, "redis", "", "Redis URL (redis://host:port/db) that all replicas share the limits through; default: each replica in its own memory")
	fs.StringVar(&opts.demo.Algorithm, "algorithm", opts.demo.Algorithm, "algorithm of GET /demo: "+strings.Join(algorithmNames(), ", "))
	fs.IntVar(&opts.demo.Limit, "demo-limit", opts.demo.Limit, "requests per hour that GET /demo admits, one quota for all clients (each replica its own without -redis)")
	fs.DurationVar(&opts.storageTimeout, "storage-timeout", opts.storageTimeout, "the limiters' StorageTimeout: a Redis call slower than this is decided by the replica's own in-memory fallback (the library's default is 100ms); at least 1ms")
	fs.Usage = func() {
		// Like the flag package's own usage: a failed write to stderr has
		// nowhere to be reported.
		_, _ = fmt.Fprint(fs.Output(), `Usage of example (from the repository root):
  go run ./example [-replicas N] [-addr host:port] [-redis URL] [-algorithm fixed|sliding|token|log] [-demo-limit N] [-storage-timeout D]

For example, 3 replicas on :3000-:3002 sharing one Redis, then the load generator:
  go run ./example -replicas 3 -redis redis://127.0.0.1:6379/0
  go run ./example/loadgen -n 1200 -targets http://127.0.0.1:3000,http://127.0.0.1:3001,http://127.0.0.1:3002 -path /demo -c 32

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return opts, err
		}
		return opts, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if opts.replicas < 1 || opts.replicas > maxReplicas {
		return opts, fmt.Errorf("%w: -replicas %d: want 1 to %d", errUsage, opts.replicas, maxReplicas)
	}
	if opts.storageTimeout < time.Millisecond {
		return opts, fmt.Errorf("%w: -storage-timeout %v: want at least 1ms", errUsage, opts.storageTimeout)
	}
	if err := opts.demo.validate(); err != nil {
		return opts, fmt.Errorf("%w: %w", errUsage, err)
	}
	return opts, nil
}
