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

// A rejection that the store gave before a refund on this replica cleared
// the key is not cached after it: it may predate the credit.
func TestDenyCacheSkipsRejectionsOlderThanARefund(t *testing.T) {
	c := newDenyCache(16, 1)
	r := one(rule{limit: 3, burst: 3, window: 10_000})
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
