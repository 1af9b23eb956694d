package quota

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Limiters dropped while Redis does not answer end their probes: once no
// reference is left, within 2 s no goroutine of theirs is left either,
// though each one's breaker was open and a probe out nearly all the time
// (a probe waits StorageTimeout, and the next one follows a cool-down of
// 1 ms later), so that no collection could find one idle.
func TestDroppedLimitersEndTheirProbes(t *testing.T) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer func() { _ = client.Close() }()
	ctx := context.Background()
	baseline := runtime.NumGoroutine()
	func() {
		ls := make([]*Limiter, 200)
		for i := range ls {
			l, err := New(Config{Name: "tenant" + strconv.Itoa(i), Limits: []Limit{PerMinute(5)}, Redis: client,
				StorageTimeout: 200 * time.Millisecond, BreakerFailures: 1, BreakerCooldown: time.Millisecond,
				OnStorageError: func(error) {}})
			require.NoError(t, err)
			_, err = l.Take(ctx, "warm", 1) // connected, script loaded
			require.NoError(t, err)
			ls[i] = l
		}
		// Redis holds every call: each limiter's first take waits for its
		// timeout and opens the breaker.
		require.NoError(t, client.Do(ctx, "CLIENT", "PAUSE", 20_000, "ALL").Err())
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() {
				for !l.decider.(*guardedStore).breaker.open() {
					_, _ = l.Take(ctx, "k", 1)
				}
			})
		}
		wg.Wait()
		time.Sleep(300 * time.Millisecond) // probes run
	}()
	dropped := time.Now()
	var n int
	for {
		runtime.GC()
		if n = runtime.NumGoroutine(); n <= baseline || time.Since(dropped) > 2*time.Second {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d goroutines %v after the limiters were dropped, %d before they were made", n, time.Since(dropped).Round(time.Millisecond), baseline)
	if n > baseline {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines 2 s after the limiters were dropped, %d before they were made:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
	srv.Stop() // ends the pause: the client's connections close
}
