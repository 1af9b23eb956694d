package main

import (
	"io"
	"time"
)

// options are the sizes and switches of one run. defaultOptions and
// quickOptions give the two presets; the smoke test shrinks them further.
type options struct {
	// rounds is how many times every figure runs all of its variants in
	// turn; each figure reports the median over the rounds.
	rounds int
	// command is the command line printed in the header.
	command string
	// redisServer and redisBenchmark are the binaries to run; an empty
	// redisBenchmark skips the ceiling figure.
	redisServer, redisBenchmark string

	// overheadTime is how long one in-memory handler measurement runs.
	overheadTime time.Duration
	// overheadKeys is the number of distinct keys of the "many keys" column
	// of the in-memory figure.
	overheadKeys int

	// heapKeys is the number of distinct keys tracked to measure heap per key.
	heapKeys int

	// redisTime is how long one Redis throughput measurement runs.
	redisTime time.Duration
	// redisKeys is the number of distinct keys of the "many keys" Redis cells.
	redisKeys int
	// callers are the numbers of concurrent callers of the Redis figures.
	callers []int
	// figures, when not empty, are the only figures run (1, 2, 3, 5, 6, 7,
	// 8; 3 gives figure 4 too).
	figures map[int]bool

	// replicas, replicaCallers, replicaRequests and replicaLimit shape the
	// admitted-across-replicas figure: replicaRequests requests on one key
	// from replicaCallers goroutines spread over replicas limiter instances,
	// against a limit of replicaLimit per long window.
	replicas, replicaCallers, replicaRequests, replicaLimit int

	// ceilingRequests is redis-benchmark's -n.
	ceilingRequests int

	// estimateWindows is how many windows each cell of figure 7 plays.
	estimateWindows int

	// waitRate, waitWindow, waitTime and waitRounds shape figure 8a: a
	// limit of waitRate per waitWindow, which is also MaxDelay and the
	// warm-up, offered 3x for waitTime after the warm-up, in waitRounds
	// rounds (one by default: each cell is seconds of counts, not a
	// speed, and the machine's noise moves it little).
	waitRate   int
	waitWindow time.Duration
	waitTime   time.Duration
	waitRounds int

	// storageTimeout, when not zero, replaces the limiter's default
	// StorageTimeout in the Redis handler variants (for slow test builds).
	storageTimeout time.Duration

	// progress receives one line per step (stderr in the program); nil
	// discards them.
	progress io.Writer
}

// runs reports whether figure n is part of the run.
func (o options) runs(n int) bool { return len(o.figures) == 0 || o.figures[n] }

// defaultOptions is the full run: about five to six minutes on two cores.
func defaultOptions() options {
	return options{
		rounds:          5,
		redisServer:     "redis-server",
		redisBenchmark:  "redis-benchmark",
		overheadTime:    100 * time.Millisecond,
		overheadKeys:    10_000,
		heapKeys:        500_000,
		redisTime:       350 * time.Millisecond,
		redisKeys:       100_000,
		callers:         []int{1, 8, 64},
		replicas:        3,
		replicaCallers:  96,
		replicaRequests: 5000,
		replicaLimit:    1000,
		ceilingRequests: 200_000,
		estimateWindows: 20_000,
		waitRate:        200,
		waitWindow:      time.Second,
		waitTime:        10 * time.Second,
		waitRounds:      1,
	}
}

// quickOptions is a smoke run of every figure, in about a minute;
// its numbers are too short-lived to quote.
func quickOptions() options {
	o := defaultOptions()
	o.rounds = 1
	o.overheadTime = 20 * time.Millisecond
	o.heapKeys = 50_000
	o.redisTime = 60 * time.Millisecond
	o.redisKeys = 10_000
	o.ceilingRequests = 20_000
	o.estimateWindows = 500
	o.waitRate = 100
	o.waitWindow = 250 * time.Millisecond
	o.waitTime = time.Second
	return o
}
