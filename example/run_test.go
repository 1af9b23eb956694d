package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cancelOnWrite records what is written and cancels a context at the first
// write: run then shuts down right after its startup message.
type cancelOnWrite struct {
	syncBuffer
	cancel context.CancelFunc
}

// Write records p, then cancels.
func (w *cancelOnWrite) Write(p []byte) (int, error) {
	defer w.cancel()
	return w.syncBuffer.Write(p)
}

// runOnce runs the command with args (and -addr 127.0.0.1:0) until its
// startup message, and returns what it printed.
func runOnce(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &cancelOnWrite{cancel: cancel}
	var errOut syncBuffer
	err = run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), out, &errOut)
	return out.String(), errOut.String(), err
}

func TestStartupInMemory(t *testing.T) {
	out, errOut, err := runOnce(t, "-replicas", "3")
	require.NoError(t, err)
	assert.Empty(t, errOut)
	assert.Contains(t, out, "Serving 3 replicas in one process")
	assert.Contains(t, out, "  replica 3  http://127.0.0.1:")
	assert.Contains(t, out, "No -redis: limits are kept in memory, each replica in its own, so 3 replicas admit up to 3×1000 = 3000 on /demo, not 1000.")
	assert.Contains(t, out, "GET /demo           fixed window: 1000 requests per hour, one quota for all clients")
	assert.Contains(t, out, "go run ./example/loadgen -n 1200 -targets http://127.0.0.1:")
	assert.NotContains(t, out, "Redis at")
	assert.Contains(t, out, "shutting down")
}

// One replica keeps the message of the example before replicas.
func TestStartupOneReplica(t *testing.T) {
	out, _, err := runOnce(t)
	require.NoError(t, err)
	assert.Regexp(t, `^Serving on http://127\.0\.0\.1:\d+ \(in-memory limiter; Ctrl\+C to stop\)\n`, out)
	assert.Contains(t, out, "No -redis: limits are kept in memory, for this process only.")
	assert.NotContains(t, out, "replica 2")
}

func TestStartupOnRedis(t *testing.T) {
	server := redistest.Start(t)
	out, errOut, err := runOnce(t, "-replicas", "3", "-redis", "redis://"+server.Addr()+"/2", "-algorithm", "sliding", "-demo-limit", "50")
	require.NoError(t, err)
	assert.Empty(t, errOut)
	assert.Contains(t, out, "Limits are kept in Redis at "+server.Addr()+" db 2, shared by the 3 replicas, each with its own client:\ntogether they admit 50 on /demo, not 50 each.")
	assert.Contains(t, out, "GET /demo           sliding window: 50 requests per hour")
	assert.Contains(t, out, "go run ./example/loadgen -n 60 -targets ")
	assert.Contains(t, out, "redis-cli -h 127.0.0.1 -p "+strconv.Itoa(server.Port)+" -n 2 DEL limiter:demo:sw:1h:demo")
	assert.NotContains(t, out, "in memory")
}

// An unreachable Redis stops the command at start with an error naming it.
func TestStartupRedisUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	start := time.Now()
	out, _, err := runOnce(t, "-replicas", "3", "-redis", "redis://"+addr+"/0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cannot reach Redis at "+addr+" db 0 (from -redis)")
	assert.Empty(t, out, "no startup message")
	assert.Less(t, time.Since(start), time.Second, "fails at once, without retries")
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-replicas", "0"},
		{"-replicas", "65"},
		{"-algorithm", "leaky"},
		{"-demo-limit", "0"},
		{"-algorithm", "log", "-demo-limit", "10001"},
		{"-storage-timeout", "500us"},
		{"-storage-timeout", "soon"},
		{"-redis", "http://127.0.0.1:6379"},
		{"extra"},
		{"-nope"},
	} {
		_, _, err := runOnce(t, args...)
		if args[0] == "-redis" { // a bad URL is found when the clients open
			assert.ErrorContains(t, err, "-redis: ", args)
			continue
		}
		assert.ErrorIs(t, err, errUsage, args)
	}
}

// -h prints the usage, with the commands of the replica demo.
func TestHelp(t *testing.T) {
	var errOut bytes.Buffer
	_, err := parseOptions([]string{"-h"}, &errOut)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Contains(t, errOut.String(), "go run ./example -replicas 3 -redis redis://127.0.0.1:6379/0")
	assert.Contains(t, errOut.String(), "go run ./example/loadgen -n 1200 -targets http://127.0.0.1:3000,http://127.0.0.1:3001,http://127.0.0.1:3002 -path /demo -c 32")
	assert.Contains(t, errOut.String(), "-demo-limit")
}

func TestDefaultOptions(t *testing.T) {
	opts, err := parseOptions(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, options{addr: "127.0.0.1:3000", replicas: 1, demo: demoConfig{Limit: 1000, Algorithm: "fixed"}, storageTimeout: time.Second}, opts)
	opts, err = parseOptions([]string{"-storage-timeout", "250ms"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, opts.storageTimeout)
}
