package limiter

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests. Ignored are
// fasthttp's one process-wide goroutine that refreshes its Date header, and
// the two that Fiber's own limiter leaves running for good (its memory
// storage's gc loop and its timestamp updater), which only the comparison
// benchmarks start.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/internal/memory.(*Storage).gc"),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/utils.StartTimeStampUpdater.func1.1"),
	)
}
