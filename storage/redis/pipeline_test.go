package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Callers deciding at the same time share pipelines: 64 goroutines making
// 100 Takes each on one key send far fewer pipelines than calls, and the
// limit still holds exactly. Without WithPipelining it sends none.
func TestConcurrentCallsSharePipelines(t *testing.T) {
	server := redistest.Start(t)
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "unpipelined"}[pipelined], func(t *testing.T) {
			client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 8})
			t.Cleanup(func() { _ = client.Close() })
			var opts []Option
			if pipelined {
				opts = append(opts, WithPipelining())
			}
			store := New(client, opts...)
			const callers, each, limit = 64, 100, 1000
			rule := Rule{Algorithm: FixedWindow, Limit: limit, Window: time.Hour}
			key := "shared-" + t.Name()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						r, err := store.Take(context.Background(), key, rule, 1)
						if !assert.NoError(t, err) {
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(limit), admitted.Load())
			pipelines, calls := store.PipelineStats()
			t.Logf("%d calls in %d pipelines", calls, pipelines)
			if !pipelined {
				assert.Zero(t, pipelines+calls)
				return
			}
			assert.Equal(t, int64(callers*each), calls)
			assert.Greater(t, float64(calls)/float64(pipelines), 2.0, "calls per write: 1 without coalescing")
		})
	}
}
