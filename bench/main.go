// Command bench compares github.com/fiberlimit/limiter, in memory and on
// Redis, with Fiber v2's middleware/limiter, go-redis/redis_rate and
// ulule/limiter, side by side in one run on one redis-server of its own,
// and prints one table. Run it from the repository root:
//
//	cd bench && go run .            # full run, about 5-6 minutes on 2 cores
//	cd bench && go run . -quick     # smoke run, about a minute
//
// See README.md for the figures and how to read them.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// parseFlags turns the command line into options: the full preset, or
// the quick one with -quick, then any size set explicitly.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "smoke run: one round, small sizes, short measurements (about a minute)")
	rounds := fs.Int("rounds", 0, "rounds per figure (default 5, 1 with -quick)")
	redisServer := fs.String("redis-server", "redis-server", "redis-server binary (path or name on PATH)")
	redisBench := fs.String("redis-benchmark", "redis-benchmark", "redis-benchmark binary; empty skips figure 6")
	heapKeys := fs.Int("heap-keys", 0, "keys tracked for the heap-per-key figure (default 500000, 50000 with -quick)")
	redisKeys := fs.Int("redis-keys", 0, "distinct keys of the many-key Redis columns (default 100000, 10000 with -quick)")
	redisTime := fs.Duration("redis-time", 0, "length of one Redis measurement (default 350ms, 60ms with -quick)")
	callers := fs.String("callers", "", "comma-separated concurrent callers of figures 3, 4 and 6 (default 1,8,64)")
	only := fs.String("only", "", "comma-separated figures to run, of 1, 2, 3 (with 4), 5, 6, 7 and 8 (default all)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	o := defaultOptions()
	if *quick {
		o = quickOptions()
	}
	o.redisServer, o.redisBenchmark = *redisServer, *redisBench
	if *rounds > 0 {
		o.rounds = *rounds
	}
	if *heapKeys > 0 {
		o.heapKeys = *heapKeys
	}
	if *redisKeys > 0 {
		o.redisKeys = *redisKeys
	}
	if *redisTime > 0 {
		o.redisTime = *redisTime
	}
	if *callers != "" {
		list, err := positiveInts(*callers)
		if err != nil {
			return options{}, fmt.Errorf("-callers %q: %w", *callers, err)
		}
		o.callers = list
	}
	if *only != "" {
		list, err := positiveInts(*only)
		if err != nil {
			return options{}, fmt.Errorf("-only %q: %w", *only, err)
		}
		o.figures = map[int]bool{}
		for _, n := range list {
			if n < 1 || n > 8 || n == 4 {
				return options{}, fmt.Errorf("-only %q: no figure %d; figures are 1, 2, 3 (with 4), 5, 6, 7 and 8", *only, n)
			}
			o.figures[n] = true
		}
	}
	o.command = strings.TrimSpace("cd bench && go run . " + strings.Join(args, " "))
	o.progress = stderr
	return o, nil
}

// positiveInts parses a comma-separated list of positive integers.
func positiveInts(s string) ([]int, error) {
	var list []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		list = append(list, n)
	}
	return list, nil
}

func main() {
	if spec, ok := os.LookupEnv(heapChildEnv); ok {
		os.Exit(runHeapChild(spec, os.Stdout))
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	start := time.Now()
	r, err := runAll(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v (after %s)\n", err, time.Since(start).Round(time.Second))
		os.Exit(1)
	}
	if err := r.write(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench: writing the report: %v\n", err)
		os.Exit(1)
	}
}
