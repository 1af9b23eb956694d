package limiter

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	"go.uber.org/goleak"
)

// exampleRedisEnv holds the address of the redis-server that TestMain
// starts for the examples (Example_redis), which cannot start one
// themselves.
const exampleRedisEnv = "LIMITER_EXAMPLE_REDIS"

// TestMain starts a redis-server for the examples (without a redis-server
// binary, the Redis example is skipped, unless LIMITER_REQUIRE_REDIS=1),
// keeps go-redis's own log lines (the failed dials of tests that kill
// Redis) out of the output unless the run fails, and fails the run if any
// goroutine outlives the tests. Ignored are
// fasthttp's one process-wide goroutine that refreshes its Date header,
// the two that Fiber's own limiter leaves running for good (its memory
// storage's gc loop and its timestamp updater), which only the comparison
// benchmarks start, the clock updaters that every Fiber cache middleware
// (and its memory storage) starts for good, and fasthttp's cleaners that outlive the gateway tests
// by a few seconds: those of the client behind proxy.Forward (its dialer's
// address cache, its hosts, a host's idle connections), and that of the
// upstream server's worker pool, which checks for its stop only after a
// 10 s sleep.
func TestMain(m *testing.M) {
	flag.Parse()
	srv, stop, err := redistest.StartForMain()
	switch {
	case err == nil:
		_ = os.Setenv(exampleRedisEnv, srv.Addr())
	case errors.Is(err, redistest.ErrNoServer):
		fmt.Fprintln(os.Stderr, "skipping Example_redis:", err)
		skip := "^Example_redis$"
		if prev := flag.Lookup("test.skip").Value.String(); prev != "" {
			skip = prev + "|" + skip
		}
		_ = flag.Set("test.skip", skip)
		stop = func() {}
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := redistest.QuietClientLogs(m).Run()
	stop()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
			goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/internal/memory.(*Storage).gc"),
			goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/utils.StartTimeStampUpdater.func1.1"),
			goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/middleware/cache.New.func2"),
			goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/internal/memory.New.StartTimeStampUpdater.func1.1"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
			goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
