package main

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/example/internal/loadgen"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the replicas' concurrent logging.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startTestReplicas starts n replicas on free loopback ports, with the
// command's defaults otherwise (its StorageTimeout too), stopped when the
// test ends; their storage error logs must stay empty.
func startTestReplicas(t *testing.T, n int, redisURL string, demo demoConfig) *replicaSet {
	t.Helper()
	logs := &syncBuffer{}
	opts, err := parseOptions([]string{"-addr", "127.0.0.1:0", "-replicas", strconv.Itoa(n)}, logs)
	require.NoError(t, err)
	opts.redisURL, opts.demo = redisURL, demo
	set, err := startReplicas(t.Context(), opts, logs)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, set.shutdown())
		assert.Empty(t, logs.String(), "storage errors")
	})
	return set
}

// row is one printed line of the load generator's table.
type row struct {
	replica                           string
	admitted, rejected, other, errors int
}

// parseTable reads back the load generator's table: each row by its first
// column, a target or "total". It fails the test on a malformed row.
func parseTable(t *testing.T, out string) map[string]row {
	t.Helper()
	rows := map[string]row{}
	inTable := false
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "target":
			require.Equal(t, []string{"target", "replica", "admitted(200)", "rejected(429)", "other", "errors"}, f)
			inTable = true
			continue
		case !inTable:
			continue
		case len(f) == 0:
			return rows
		}
		require.Len(t, f, 6, "row %q", line)
		n := make([]int, 4)
		for i := range n {
			var err error
			n[i], err = strconv.Atoi(f[2+i])
			require.NoError(t, err, "row %q", line)
		}
		rows[f[0]] = row{replica: f[1], admitted: n[0], rejected: n[1], other: n[2], errors: n[3]}
	}
	require.True(t, inTable, "no table in:\n%s", out)
	return rows
}

// load runs the load generator on /demo of every replica of set, checks
// that the printed table says what the returned report does, and returns
// the table.
func load(t *testing.T, set *replicaSet, requests int) (map[string]row, *loadgen.Report) {
	t.Helper()
	var out bytes.Buffer
	report, err := loadgen.Run(t.Context(), &out, loadgen.Options{
		Targets: set.urls(), Path: "/demo", Requests: requests, Concurrency: 32,
	})
	require.NoError(t, err)
	t.Logf("load generator:\n%s", out.String())
	rows := parseTable(t, out.String())
	require.Len(t, rows, len(set.urls())+1, "a row per replica and the total")
	for _, c := range append(report.Targets, report.Total) {
		assert.Equal(t, row{c.Replica, c.Admitted, c.Rejected, c.Other, c.Errors}, rows[c.Target], c.Target)
	}
	assert.Contains(t, out.String(), "latency over "+strconv.Itoa(requests)+" responses: min ")
	return rows, report
}

// In memory each replica has its own quota: round-robin gives each of the
// 3 replicas 400 of the 1200 requests, all admitted under a limit of 1000;
// under a limit of 300 each admits 300, 900 in all.
func TestLoadgenReplicasInMemory(t *testing.T) {
	for _, c := range []struct{ limit, admitted, rejected int }{
		{1000, 400, 0},
		{300, 300, 100},
	} {
		t.Run(strconv.Itoa(c.limit), func(t *testing.T) {
			set := startTestReplicas(t, 3, "", demoConfig{Limit: c.limit, Algorithm: "fixed"})
			rows, _ := load(t, set, 1200)
			for i, u := range set.urls() {
				assert.Equal(t, row{strconv.Itoa(i + 1), c.admitted, c.rejected, 0, 0}, rows[u], "replica %d", i+1)
			}
			assert.Equal(t, row{"-", 3 * c.admitted, 3 * c.rejected, 0, 0}, rows["total"])
		})
	}
}

// Sharing one Redis, the 3 replicas, each with its own client and
// limiter, admit exactly 1000 of 1200 requests together.
func TestLoadgenReplicasOnRedis(t *testing.T) {
	server := redistest.Start(t)
	for i, alg := range algorithmNames() {
		t.Run(alg, func(t *testing.T) {
			url := "redis://" + server.Addr() + "/" + strconv.Itoa(i) // a database per algorithm
			set := startTestReplicas(t, 3, url, demoConfig{Limit: 1000, Algorithm: alg})
			rows, report := load(t, set, 1200)
			admitted := 0
			for i, u := range set.urls() {
				r := rows[u]
				assert.Equal(t, strconv.Itoa(i+1), r.replica)
				assert.Equal(t, 400, r.admitted+r.rejected, "replica %d: its share of the requests", i+1)
				admitted += r.admitted
			}
			assert.Equal(t, rows["total"].admitted, admitted)
			want := row{"-", 1000, 200, 0, 0}
			if alg == "token" {
				// The bucket refills 1000 tokens an hour, one every 3.6 s.
				extra := int(report.Elapsed / (3600 * time.Millisecond))
				assert.LessOrEqual(t, rows["total"].admitted, 1000+extra)
				want.admitted, want.rejected = rows["total"].admitted, 1200-rows["total"].admitted
			}
			assert.Equal(t, want, rows["total"])
		})
	}
}
