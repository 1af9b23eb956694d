package nethttp

import (
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests, and keeps
// go-redis's own log lines out of the output unless the run fails.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.QuietClientLogs(m))
}
