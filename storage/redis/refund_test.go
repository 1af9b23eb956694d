package redis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRefund(t *testing.T) {
	ctx := context.Background()

	t.Run("fixed window", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		rule := Rule{Algorithm: FixedWindow, Max: 3, Expiration: time.Second}
		var first Result
		for range 3 {
			r, err := store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			first = r
		}
		require.Equal(t, ms(0), first.CountedIn)
		// Credit one back in its window: one more fits, then none.
		require.NoError(t, store.Refund(ctx, "k", rule, 1, first.CountedIn))
		assert.Equal(t, [3]int64{ms(0), 2, 0}, stateOf(t, rdb, "k"))
		r, err := store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.Zero(t, r.Remaining)

		// A refund naming another window (the next one, not yet started)
		// changes nothing.
		require.NoError(t, store.Refund(ctx, "k", rule, 1, ms(time.Second)))
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)

		// In the next window, a refund with the stale CountedIn of the
		// previous one changes nothing.
		c.at(time.Second)
		r, err = store.Take(ctx, "k", rule, 2)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.Equal(t, ms(time.Second), r.CountedIn)
		before, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		require.NoError(t, store.Refund(ctx, "k", rule, 2, first.CountedIn))
		after, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, before, after)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.False(t, r.Allowed, "stale refund credited nothing")

		// A refund larger than the count stops at zero.
		require.NoError(t, store.Refund(ctx, "k", rule, 10, ms(time.Second)))
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		assert.Equal(t, int64(2), r.Remaining)
	})

	t.Run("sliding window", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		rule := Rule{Algorithm: SlidingWindow, Max: 4, Expiration: time.Second}
		r, err := store.Take(ctx, "k", rule, 4)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		counted := r.CountedIn

		// Next window at e=1/2: prev 4 weighs 2. Refunding 2 into the
		// previous window (the one CountedIn names) leaves 1.
		c.at(1500 * time.Millisecond)
		require.NoError(t, store.Refund(ctx, "k", rule, 2, counted))
		assert.Equal(t, [3]int64{ms(time.Second), 0, 2}, stateOf(t, rdb, "k"))
		// Only the previous window's count is left, needed until 2s; a
		// refund never shortens a key's life (the take's rule, which set
		// it, may not be the refund's), so it lasts as the take had it.
		pttl, err := rdb.PTTL(ctx, "k").Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, pttl, 2000*time.Millisecond)
		assert.Greater(t, pttl, 1750*time.Millisecond)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		assert.Equal(t, int64(2), r.Remaining, "4 - 1 - ceil(2*1/2)")

		// Refund into the current window.
		require.NoError(t, store.Refund(ctx, "k", rule, 1, r.CountedIn))
		v, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, [3]int64{ms(time.Second), 0, 2}, decodeState(t, v))

		// A CountedIn of neither window changes nothing.
		require.NoError(t, store.Refund(ctx, "k", rule, 2, counted-1))
		require.NoError(t, store.Refund(ctx, "k", rule, 2, ms(2*time.Second)))
		after, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, v, after)
	})

	t.Run("token bucket never above capacity", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		rule := Rule{Algorithm: TokenBucket, Max: 1, Burst: 3, Expiration: time.Second}
		r, err := store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.NoError(t, store.Refund(ctx, "k", rule, 5, r.CountedIn))
		n, err := rdb.Exists(ctx, "k").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "a full bucket is not stored")
		// Capacity 3, not 3 + 4 refunded beyond it.
		for i := range 3 {
			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			require.True(t, r.Allowed, "take %d", i)
			assert.Equal(t, int64(2-i), r.Remaining)
		}
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.False(t, r.Allowed)

		assert.Equal(t, [3]int64{ms(0), 3000, 0}, stateOf(t, rdb, "k"), "3 tokens owed, in token-ms")
		assert.Zero(t, r.CountedIn, "a rejected take counts nowhere")

		// A partial refund gives back exactly what was taken. The last
		// admitted take's CountedIn: the 3000 owed refill by 3s.
		require.NoError(t, store.Refund(ctx, "k", rule, 2, ms(0)+3000))
		assert.Equal(t, [3]int64{ms(0), 1000, 0}, stateOf(t, rdb, "k"))
		r, err = store.Take(ctx, "k", rule, 2)
		require.NoError(t, err)
		assert.True(t, r.Allowed)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.False(t, r.Allowed)
	})
}

// A bucket refund gives back only what of the cost has not refilled yet:
// a request that failed after the bucket refilled earns nothing back, so
// the requests after it cannot exceed the capacity.
func TestBucketRefundAfterRefill(t *testing.T) {
	c := newClock()
	store, _, _ := newStore(t, c)
	ctx := context.Background()
	rule := Rule{Algorithm: TokenBucket, Max: 1, Burst: 1, Expiration: time.Second}
	slow, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	require.True(t, slow.Allowed)
	c.at(time.Second)
	r, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed, "refilled after a second")
	c.at(time.Second + time.Millisecond)
	require.NoError(t, store.Refund(ctx, "k", rule, 1, slow.CountedIn))
	r, err = store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	assert.False(t, r.Allowed, "the slow request's token had refilled already")
}
