package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// serverPID is the process id that the server at s.Addr() reports.
func serverPID(t *testing.T, s *Server) int {
	t.Helper()
	info, err := s.Client(t).Info(context.Background(), "server").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			require.NoError(t, err)
			return pid
		}
	}
	t.Fatal("INFO server has no process_id")
	return 0
}

// A port that another process binds between freePort and redis-server's
// own bind (another package's tests run at the same time) is answered by
// that process's server: Start notices that its server exited, and starts
// it on another port; the Server it returns is the process it started.
func TestStartRetriesATakenPort(t *testing.T) {
	other := Start(t)
	picks := 0
	pickPort = func(t testing.TB) int {
		picks++
		if picks == 1 {
			return other.Port
		}
		return freePort(t)
	}
	t.Cleanup(func() { pickPort = freePort })

	s := Start(t)
	require.Equal(t, 2, picks, "a second port, after the taken one")
	require.NotEqual(t, other.Port, s.Port)
	require.Equal(t, s.cmd.Process.Pid, serverPID(t, s), "the server at its address is the one it started")
}

// A server that cannot bind its port (Restart's, taken by another process
// in between) is reported as such, rather than handing the test the other
// process's server.
func TestStartReportsATakenPort(t *testing.T) {
	other := Start(t)
	s := &Server{Port: other.Port, dir: t.TempDir(), t: t}
	err := s.start(binary(t, "redis-server"))
	require.ErrorIs(t, err, errPortTaken)
	require.Nil(t, s.cmd)
}
