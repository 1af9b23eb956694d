package quota

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A limiter built per request, and dropped, meets the one before it at
// each New, which only a collection can tell is gone: New collects for it
// at most once per clashLookEvery, not once per call, and what it accepts
// unchecked turns out no clash (nothing is reported).
func TestNewPerRequestCollectsRarely(t *testing.T) {
	client := redistest.Start(t).Client(t)
	var reports atomic.Int32
	cfg := Config{Limits: []Limit{PerMinute(5)}, Redis: client, DisableDenyCache: true, FailurePolicy: FailOpen,
		OnStorageError: func(err error) {
			if strings.Contains(err.Error(), "another limiter of this process") {
				reports.Add(1)
			}
		}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range 100 {
		_, err := New(cfg)
		require.NoError(t, err)
	}
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	// A New that collected for each call would make 99 at least.
	gcs := int(after.NumGC - before.NumGC)
	assert.Less(t, gcs, 10+int(took/clashLookEvery), "collections over 100 News in %v", took)
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // cleanups and reports run
	}
	assert.Zero(t, reports.Load(), "limiters that were garbage reported as a clash")
}

// A clash that New let through unchecked (a limiter kept, and another of
// the same identity made a moment after a look) is reported after the
// next collection.
func TestUncheckedClashIsReported(t *testing.T) {
	client := redistest.Start(t).Client(t)
	var reported atomic.Bool
	cfg := Config{Limits: []Limit{PerMinute(5)}, Redis: client}
	func() {
		_, err := New(cfg)
		require.NoError(t, err)
	}()
	first, err := New(cfg) // meets the garbage above: looks, and finds it gone
	require.NoError(t, err)
	cfg.OnStorageError = func(err error) {
		if strings.Contains(err.Error(), "another limiter of this process keeps its state in the same Storage") {
			reported.Store(true)
		}
	}
	second, err := New(cfg) // meets first, which came after the look
	require.NoError(t, err)
	assert.Eventually(t, func() bool { runtime.GC(); return reported.Load() }, 5*time.Second, 10*time.Millisecond)
	runtime.KeepAlive(first)
	runtime.KeepAlive(second)
}
