package redis

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: every client
// and every redis-server a test starts must be closed by its cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
