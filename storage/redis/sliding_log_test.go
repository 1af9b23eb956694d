package redis

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logOf packs a one-limit log value of the given times (ms), as the script
// lays it out: the count (2 bytes), then each time (6 bytes), little-endian.
func logOf(times ...int64) string {
	b := binary.LittleEndian.AppendUint16(nil, uint16(len(times)))
	for _, t := range times {
		b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24), byte(t>>32), byte(t>>40))
	}
	return string(b)
}

// A log value another program wrote, full of entries out of time order
// (far ahead of a recent newest one) and without a TTL, reads as no state:
// the key is admitted at once and from then on holds a log of ours, with a
// TTL.
func TestLogOutOfOrderIsNoState(t *testing.T) {
	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	rule := Rule{Algorithm: SlidingLog, Max: 3, Expiration: time.Second}
	far := ms(10 * 365 * 24 * time.Hour)
	require.NoError(t, rdb.Set(ctx, "foreign", logOf(far, far, ms(-5*time.Second)), 0).Err())
	r, err := store.Take(ctx, "foreign", rule, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.Equal(t, int64(2), r.Remaining)
	ttl, err := rdb.PTTL(ctx, "foreign").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl)
	assert.LessOrEqual(t, ttl, time.Second)

	// Out of order behind the newest: rejected while it reads as full, but
	// never for longer than the rule, and the key gets a TTL.
	require.NoError(t, rdb.Set(ctx, "middle", logOf(ms(-300*time.Millisecond), far, ms(-100*time.Millisecond)), 0).Err())
	r, err = store.Take(ctx, "middle", rule, 1)
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	assert.LessOrEqual(t, r.RetryAfter, time.Second)
	c.at(time.Second)
	r, err = store.Take(ctx, "middle", rule, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed, "a second on, what the value holds has left or reads as no state")
}
