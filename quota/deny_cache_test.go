package quota

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A take that the store rejected is answered by the deny cache, without a
// call, until its RetryAfter: with Source SourceDenyCache and the
// rejection's RetryAfter less the time passed. TakeUpTo of a key rejected
// for a take of 1 is answered too. Then the store decides again.
func TestDenyCacheAnswersRejectedKeys(t *testing.T) {
	ctx := context.Background()
	store := newFaultyStorage(t)
	now := newSettableNow()
	l, err := New(Config{Limits: []Limit{PerMinute(2)}, Storage: store, Now: now.Now})
	require.NoError(t, err)
	requireTake(t, l, "k", true, SourceBackend)
	requireTake(t, l, "k", true, SourceBackend)
	rejected := requireTake(t, l, "k", false, SourceBackend)
	require.Equal(t, time.Minute, rejected.RetryAfter())
	gets := store.gets.Load()

	cached := requireTake(t, l, "k", false, SourceDenyCache)
	assert.Equal(t, time.Minute, cached.RetryAfter())
	assert.Equal(t, 2, cached.Tightest().Limit)
	now.Add(500 * time.Millisecond)
	cached = requireTake(t, l, "k", false, SourceDenyCache)
	assert.Equal(t, 59500*time.Millisecond, cached.RetryAfter())
	granted, res, err := l.TakeUpTo(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, 0, granted)
	assert.Equal(t, SourceDenyCache, res.Source())
	requireTake(t, l, "other", true, SourceBackend)
	assert.Equal(t, gets+1, store.gets.Load(), "only the other key's take called the store")

	// A rejection is kept for 900 ms at most (so that an operator's Reset
	// on another replica reaches this one within a second): the store
	// decides again, and the cache keeps its new answer.
	now.Add(400 * time.Millisecond)
	requireTake(t, l, "k", false, SourceBackend)
	requireTake(t, l, "k", false, SourceDenyCache)
	assert.Equal(t, gets+2, store.gets.Load())

	now.Add(59100 * time.Millisecond)
	requireTake(t, l, "k", true, SourceBackend)
}

// A refund on this replica drops the key from the deny cache: its next
// take is decided by the store, which has room again.
func TestDenyCacheForgetsRefundedKeys(t *testing.T) {
	ctx := context.Background()
	store := newFaultyStorage(t)
	l, err := New(Config{Limits: []Limit{PerMinute(1)}, Storage: store, Now: newSettableNow().Now})
	require.NoError(t, err)
	taken := requireTake(t, l, "k", true, SourceBackend)
	requireTake(t, l, "k", false, SourceBackend)
	requireTake(t, l, "k", false, SourceDenyCache)
	_, err = l.Refund(ctx, "k", 1, &taken)
	require.NoError(t, err)
	requireTake(t, l, "k", true, SourceBackend)
}

// With DisableDenyCache every take calls the store.
func TestDisableDenyCache(t *testing.T) {
	store := newFaultyStorage(t)
	l, err := New(Config{Limits: []Limit{PerMinute(1)}, Storage: store, Now: newSettableNow().Now, DisableDenyCache: true})
	require.NoError(t, err)
	requireTake(t, l, "k", true, SourceBackend)
	for range 3 {
		requireTake(t, l, "k", false, SourceBackend)
	}
	assert.Equal(t, int64(4), store.gets.Load())
}

// A rejection that the store gave before a refund on this replica cleared
// the key is not cached after it: it may predate the credit.
func TestDenyCacheSkipsRejectionsOlderThanARefund(t *testing.T) {
	c := newDenyCache(16, 1)
	r := one(rule{max: 3, burst: 3, window: 10_000})
	deny := Result{n: 1}
	deny.each[0] = Decision{Limit: 3, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second}
	_, ok, gen := c.check("k", 0, &r, 1)
	require.False(t, ok)
	c.forget("k") // a refund ran while the store was deciding
	c.add("k", 0, &r, 1, &deny, gen)
	_, ok, gen = c.check("k", 1, &r, 1)
	require.False(t, ok)
	c.add("k", 1, &r, 1, &deny, gen)
	v, ok, _ := c.check("k", 2, &r, 1)
	require.True(t, ok)
	assert.Equal(t, 9999*time.Millisecond, v.RetryAfter(), "added at 1 ms, asked at 2 ms")
}
