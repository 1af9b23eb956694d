package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// report is the outcome of one run: every figure, and what the header
// says.
type report struct {
	o          options
	machine    string
	elapsed    time.Duration
	overhead   *overheadResult
	heap       *heapResult
	throughput *throughputResult
	replicas   *replicasResult
	ceiling    *ceilingResult
	estimate   *estimateResult
	waiting    *waitingResult
	slots      *slotsResult
}

// progressf writes one progress line, when o has somewhere to write it.
func progressf(o options, format string, args ...any) {
	if o.progress != nil { // best effort: a lost progress line costs nothing
		_, _ = fmt.Fprintf(o.progress, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// count writes n as 100k, 1M or 1234.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	default:
		return strconv.Itoa(n)
	}
}

// runAll starts a redis-server, measures every figure, and stops the server
// on return, on SIGINT or SIGTERM (exiting with 130), and on a panic of
// this goroutine (a crash of the process kills it too, see dieWithParent).
func runAll(o options) (*report, error) {
	start := time.Now()
	srv, err := startRedis(o.redisServer)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	defer func() { signal.Stop(sigs); close(done) }()
	go func() {
		select {
		case s := <-sigs:
			srv.stop()
			fmt.Fprintf(os.Stderr, "%v: redis-server stopped\n", s)
			os.Exit(130)
		case <-done:
		}
	}()
	progressf(o, "redis-server on %s", srv.addr())

	r := &report{o: o, machine: machineLine(o.redisServer)}
	if o.runs(1) {
		if r.overhead, err = runOverhead(o); err != nil {
			return nil, fmt.Errorf("figure 1: %w", err)
		}
	}
	if o.runs(2) {
		if r.heap, err = runHeap(o); err != nil {
			return nil, fmt.Errorf("figure 2: %w", err)
		}
	}
	if o.runs(3) {
		if r.throughput, err = runThroughput(o, srv); err != nil {
			return nil, fmt.Errorf("figures 3-4: %w", err)
		}
	}
	if o.runs(5) {
		if r.replicas, err = runReplicas(o, srv); err != nil {
			return nil, fmt.Errorf("figure 5: %w", err)
		}
	}
	if o.runs(6) {
		if r.ceiling, err = runCeiling(o, srv); err != nil {
			return nil, fmt.Errorf("figure 6: %w", err)
		}
	}
	if o.runs(7) {
		if r.estimate, err = runEstimate(o); err != nil {
			return nil, fmt.Errorf("figure 7: %w", err)
		}
	}
	if o.runs(8) {
		if r.waiting, err = runWaiting(o, srv); err != nil {
			return nil, fmt.Errorf("figure 8a: %w", err)
		}
		if r.slots, err = runSlots(o, srv); err != nil {
			return nil, fmt.Errorf("figures 8b-8c: %w", err)
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}

// write prints the header and every figure's tables, and returns the first
// write error.
func (r *report) write(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.println("# github.com/fiberlimit/limiter: side-by-side benchmark")
	ew.println()
	ew.printf("command: %s\n", r.o.command)
	ew.printf("machine: %s\n", r.machine)
	ew.printf("rounds:  %d; each round runs every variant of a figure in turn; cells are medians over rounds; run took %s\n",
		r.o.rounds, r.elapsed.Round(time.Second))
	ew.println("peers:   Fiber v2 middleware/limiter (memory; gofiber/storage/redis/v3), go-redis/redis_rate/v10, ulule/limiter/v3 (redis; memory)")
	if ew.err != nil {
		return ew.err
	}
	var figures [][]*table
	if r.overhead != nil {
		figures = append(figures, r.overhead.tables())
	}
	if r.heap != nil {
		figures = append(figures, r.heap.tables())
	}
	if r.throughput != nil {
		figures = append(figures, r.throughput.tables())
	}
	if r.replicas != nil {
		figures = append(figures, r.replicas.tables())
	}
	if r.ceiling != nil {
		figures = append(figures, r.ceiling.tables())
	}
	if r.estimate != nil {
		figures = append(figures, r.estimate.tables())
	}
	if r.waiting != nil {
		figures = append(figures, r.waiting.tables(), r.slots.tables())
	}
	for _, ts := range figures {
		for _, t := range ts {
			if err := t.write(w); err != nil {
				return err
			}
		}
	}
	return nil
}

// errWriter writes to w until a write fails, then no more: err is the
// first failure, for the caller to check once at the end.
type errWriter struct {
	w   io.Writer
	err error
}

// printf is fmt.Fprintf to w, unless a write has failed.
func (ew *errWriter) printf(format string, args ...any) {
	if ew.err == nil {
		_, ew.err = fmt.Fprintf(ew.w, format, args...)
	}
}

// println is fmt.Fprintln to w, unless a write has failed.
func (ew *errWriter) println(args ...any) {
	if ew.err == nil {
		_, ew.err = fmt.Fprintln(ew.w, args...)
	}
}
