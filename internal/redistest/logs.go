package redistest

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Runner is what a TestMain runs: a *testing.M.
type Runner interface{ Run() int }

// QuietClientLogs returns m, run with go-redis's own log lines (a pool's
// failed dials, which tests that kill Redis cause by the hundred, and its
// notices about connections) kept out of the test output. go-redis logs
// through one process-wide logger (redis.SetLogger): while m runs, it
// keeps the last keptClientLogs lines, and prints them, with how many
// there were, only when the run fails. The limiter's own log lines, which
// go to the standard logger, are left alone.
func QuietClientLogs(m Runner) Runner { return quietRun{m, os.Stderr} }

// keptClientLogs is how many of go-redis's latest log lines a failed run
// prints.
const keptClientLogs = 50

// quietRun runs m, and prints go-redis's lines to out if it fails.
type quietRun struct {
	m   Runner
	out io.Writer
}

func (q quietRun) Run() int {
	logs := &clientLogs{}
	redis.SetLogger(logs)
	code := q.m.Run()
	if code != 0 {
		logs.print(q.out)
	}
	return code
}

// clientLogs is a go-redis logger that keeps the latest lines.
type clientLogs struct {
	mu    sync.Mutex
	n     int
	lines []string // the latest, at most keptClientLogs
}

// Printf keeps a line.
func (l *clientLogs) Printf(_ context.Context, format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if len(l.lines) == keptClientLogs {
		l.lines = append(l.lines[:0], l.lines[1:]...)
	}
	l.lines = append(l.lines, line)
}

// print writes how many lines go-redis logged, and the latest.
func (l *clientLogs) print(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "go-redis logged %d line(s) during the run; the latest %d:\n", l.n, len(l.lines))
	for _, line := range l.lines {
		_, _ = fmt.Fprintln(w, line)
	}
}
