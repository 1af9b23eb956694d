package redistest

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runFunc is a Runner.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// deadAddr is a loopback address that refuses connections.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// go-redis's lines (here a pool's failed dial) are kept while the run
// goes on, and printed only if it fails, with their count.
func TestQuietClientLogs(t *testing.T) {
	for _, code := range []int{0, 1} {
		var out bytes.Buffer
		run := quietRun{runFunc(func() int {
			c := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1})
			defer func() { _ = c.Close() }()
			require.Error(t, c.Ping(context.Background()).Err())
			return code
		}), &out}
		require.Equal(t, code, run.Run())
		if code == 0 {
			assert.Empty(t, out.String(), "a run that passed prints nothing")
			continue
		}
		assert.Contains(t, out.String(), "go-redis logged 1 line(s)")
		assert.Contains(t, out.String(), "connection refused")
	}
}

// Of many lines, the latest keptClientLogs are kept, and all counted.
func TestClientLogsKeepsTheLatest(t *testing.T) {
	logs := &clientLogs{}
	for n := range 3 * keptClientLogs {
		logs.Printf(context.Background(), "line %d", n)
	}
	var out bytes.Buffer
	logs.print(&out)
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 1+keptClientLogs)
	assert.Contains(t, string(lines[0]), "logged 150 line(s)")
	assert.Equal(t, "line 149", string(lines[len(lines)-1]))
	assert.Equal(t, "line 100", string(lines[1]))
}
