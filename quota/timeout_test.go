package quota

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Storage that does not answer within StorageTimeout: the take returns
// at the timeout with the policy's answer, reports ErrStorageTimeout, and
// timeouts in a row open the breaker (the store never answered, so it is
// not merely slow).
func TestStorageTimeout(t *testing.T) {
	store := newFaultyStorage(t)
	store.mode.Store(storeHung)
	var reports storageErrors
	l, err := New(Config{Limits: []Limit{PerMinute(5)}, Storage: store, FailurePolicy: FailOpen,
		StorageTimeout: 20 * time.Millisecond, BreakerFailures: 2, BreakerCooldown: time.Minute,
		Now: newSettableNow().Now, OnStorageError: reports.hook})
	require.NoError(t, err)
	start := time.Now()
	requireTake(t, l, "k", true, SourceFailOpen)
	assert.Less(t, time.Since(start), 5*time.Second, "the call hangs until the test ends; the take does not")
	require.NotEmpty(t, reports.all())
	assert.ErrorIs(t, reports.all()[0], ErrStorageTimeout)
	requireTake(t, l, "k", true, SourceFailOpen) // waits for the key's lock, held by the hung call, and times out
	assert.True(t, l.decider.(*guardedStore).breaker.open(), "two timeouts in a row")
	gets := store.gets.Load()
	requireTake(t, l, "other", true, SourceFailOpen)
	assert.Equal(t, gets, store.gets.Load(), "no call once the breaker is open")
}

// A timeout while the store answers other calls in time is a slow store,
// not an absent one: it is reported, but it does not open the breaker.
func TestStorageTimeoutAmidAnswers(t *testing.T) {
	store := newFaultyStorage(t)
	store.hangKey = "slow"
	var reports storageErrors
	l, err := New(Config{Limits: []Limit{PerMinute(5)}, Storage: store, FailurePolicy: FailClosed,
		StorageTimeout: time.Second, BreakerFailures: 1, OnStorageError: reports.hook})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var slow Result
	wg.Go(func() { slow, _ = l.Take(context.Background(), "slow", 1) })
	waitFor(t, "the slow call to begin", func() bool { return store.gets.Load() == 1 })
	requireTake(t, l, "fast", true, SourceBackend) // answered while the slow call waits
	wg.Wait()
	assert.Equal(t, SourceFailClosed, slow.Source())
	require.NotEmpty(t, reports.all())
	assert.ErrorIs(t, reports.all()[0], ErrStorageTimeout)
	assert.False(t, l.decider.(*guardedStore).breaker.open())
	requireTake(t, l, "fast", true, SourceBackend)
}

// A Storage that panics fails the call, not the process: the policy
// answers, and the panic is reported.
func TestStoragePanics(t *testing.T) {
	store := newFaultyStorage(t)
	store.mode.Store(storePanics)
	var reports storageErrors
	l, err := New(Config{Limits: []Limit{PerMinute(5)}, Storage: store, FailurePolicy: FailClosed, OnStorageError: reports.hook})
	require.NoError(t, err)
	requireTake(t, l, "k", false, SourceFailClosed)
	require.NotEmpty(t, reports.all())
	assert.ErrorContains(t, reports.all()[0], "storage call panicked: storage bug")
	_, err = l.Penalize(context.Background(), "k", 1)
	assert.Error(t, err)
}
