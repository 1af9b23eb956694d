package quota

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two limiters of one process on one Redis with the same algorithm and
// windows and no Name are refused; limiters that are gone leave nothing
// in the registry.
func TestIdentities(t *testing.T) {
	client := redistest.Start(t).Client(t)
	count := func() int {
		identities.Lock()
		defer identities.Unlock()
		return len(identities.m)
	}
	t.Run("a clash is an error", func(t *testing.T) {
		first, err := New(Config{Limits: []Limit{PerMinute(5)}, Redis: client})
		require.NoError(t, err)
		_, err = New(Config{Limits: []Limit{PerMinute(5)}, Redis: client})
		assert.ErrorContains(t, err, "another limiter of this process keeps its state in the same Storage")
		runtime.KeepAlive(first)
	})
	t.Run("limiters that are gone leave nothing behind", func(t *testing.T) {
		before := count()
		kept := make([]*Limiter, 0, 200) // alive until counted: a GC meanwhile would drop them
		for i := range 200 {
			l, err := New(Config{Name: "tenant" + strconv.Itoa(i), Limits: []Limit{PerMinute(5)}, Redis: client})
			require.NoError(t, err)
			kept = append(kept, l)
		}
		require.GreaterOrEqual(t, count(), len(kept))
		runtime.KeepAlive(kept) // and from here on, garbage
		assert.Eventually(t, func() bool { runtime.GC(); return count() <= before }, 5*time.Second, 10*time.Millisecond,
			"each limiter's cleanup drops its identity")
	})
}
