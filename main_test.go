package limiter

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests. fasthttp starts
// one process-wide goroutine that refreshes its Date header once a second;
// it is fasthttp's, started on the first request, not one per limiter.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"))
}
