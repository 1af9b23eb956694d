package quota

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The breaker's states: timeouts in a row open it, a probe after the
// cool-down that times out opens it again, one that is answered closes it,
// and a probe that times out after another call closed the breaker leaves
// it closed.
func TestBreakerStates(t *testing.T) {
	b := newBreaker(2, 1000)
	b.failed(0, false)
	ok, _ := b.allow(1)
	require.True(t, ok, "one timeout is not enough")
	b.failed(1, false)
	ok, _ = b.allow(1000)
	require.False(t, ok, "open")
	ok, probe := b.allow(1001)
	require.True(t, ok && probe)
	ok, _ = b.allow(1001)
	require.False(t, ok, "one probe at a time")
	b.failed(1100, true)
	ok, _ = b.allow(2099)
	require.False(t, ok, "the probe timed out: another cool-down, from when it failed")
	ok, probe = b.allow(2100)
	require.True(t, ok && probe)
	b.answered(false) // another call, in flight, was answered: closed
	b.failed(2200, true)
	ok, probe = b.allow(2200)
	require.True(t, ok && !probe, "a late probe timeout does not reopen a closed breaker")
}

// BreakerFailures calls in a row that find the store out of reach open
// the breaker: takes then go to the FailurePolicy without a call, until
// BreakerCooldown has passed on the limiter's clock. The take that finds
// it passed is answered by the policy too, and starts a probe: one that
// fails keeps the breaker open for another cool-down, one that the store
// answers closes it.
func TestBreakerOpensAndProbes(t *testing.T) {
	store := newFaultyStorage(t)
	now := newSettableNow()
	var reports storageErrors
	l, err := New(Config{Limits: []Limit{PerMinute(100)}, Storage: store, FailurePolicy: FailClosed,
		BreakerFailures: 3, BreakerCooldown: time.Minute, Now: now.Now, OnStorageError: reports.hook})
	require.NoError(t, err)
	g := l.decider.(*guardedStore)
	requireTake(t, l, "k", true, SourceBackend)

	store.mode.Store(storeDown)
	for i := range 3 {
		require.False(t, g.breaker.open(), "after %d failures", i)
		requireTake(t, l, "k", false, SourceFailClosed)
	}
	require.True(t, g.breaker.open(), "after BreakerFailures failures")
	gets := store.gets.Load()
	assert.Equal(t, int64(4), gets)
	now.Add(time.Minute - time.Millisecond)
	requireTake(t, l, "k", false, SourceFailClosed)
	assert.Equal(t, gets, store.gets.Load(), "open: no call until the cool-down has passed")

	// A probe that fails: another cool-down.
	now.Add(time.Millisecond)
	requireTake(t, l, "k", false, SourceFailClosed)
	waitFor(t, "the probe to fail", func() bool { return !g.breaker.probing.Load() && store.gets.Load() == gets+1 })
	require.True(t, g.breaker.open())
	store.mode.Store(storeUp)
	now.Add(time.Minute - time.Millisecond)
	requireTake(t, l, "k", false, SourceFailClosed)
	assert.Equal(t, gets+1, store.gets.Load(), "no call within the probe's cool-down")

	// A probe that the store answers closes the breaker.
	now.Add(time.Millisecond)
	requireTake(t, l, "k", false, SourceFailClosed)
	waitFor(t, "the probe to close the breaker", func() bool { return !g.breaker.open() })
	assert.Equal(t, gets+2, store.gets.Load(), "the probe's call")
	requireTake(t, l, "k", true, SourceBackend)

	var report *StorageError
	require.ErrorAs(t, reports.all()[0], &report)
	assert.False(t, report.BreakerOpen, "the first failure, before the breaker opened")
}
