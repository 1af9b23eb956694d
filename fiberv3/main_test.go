package limiter

import (
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests, but for
// fasthttp's process-wide Date updater and Fiber's timestamp updater, and
// keeps go-redis's own log lines out of the output unless the run fails.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.QuietClientLogs(m),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/gofiber/utils/v2.StartTimeStampUpdater.func1.1"),
	)
}
