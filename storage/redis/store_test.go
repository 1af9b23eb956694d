package redis

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storage is the method set of fiber.Storage, declared here so that the
// check below does not depend on Fiber; the one after it checks against
// Fiber's own interface.
type storage interface {
	Get(key string) ([]byte, error)
	Set(key string, val []byte, exp time.Duration) error
	Delete(key string) error
	Reset() error
	Close() error
}

var (
	_ storage       = (*Store)(nil)
	_ fiber.Storage = (*Store)(nil)
)

// base is the client clock's origin in the tests that use one. It has a
// sub-millisecond part (0.456789ms), which the store drops: base+d counts
// as the millisecond of base plus d for every whole-millisecond d.
var base = time.Unix(1_700_000_000, 123_456_789)

// ms is base+d in the scripts' milliseconds, as CountedIn reports it.
func ms(d time.Duration) int64 { return base.Add(d).UnixMilli() }

// clock is a settable client clock for WithClock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: base} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// at sets the clock to base+d.
func (c *clock) at(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = base.Add(d)
}

// newStore starts a redis-server and returns a store on it with the given
// client clock (nil: the server's TIME), and a second client for looking at
// the server directly.
func newStore(t *testing.T, c *clock) (*Store, *goredis.Client, *redistest.Server) {
	t.Helper()
	server := redistest.Start(t)
	var opts []Option
	if c != nil {
		opts = append(opts, WithClock(c.now))
	}
	return New(server.Client(t), opts...), server.Client(t), server
}

var algorithms = []struct {
	name string
	alg  Algorithm
}{
	{"fixed", FixedWindow},
	{"sliding", SlidingWindow},
	{"bucket", TokenBucket},
	{"log", SlidingLog},
}

// Each case is a sequence of Takes on one key at given client times, with
// the full Result expected of each. The values follow from the scripts; the
// comments derive the less obvious ones by hand from the semantics.
func TestTakeDecisions(t *testing.T) {
	type step struct {
		at   time.Duration // client clock, from base
		cost int64
		want Result
	}
	tests := []struct {
		name  string
		rule  Rule
		steps []step
	}{
		{
			name: "fixed window",
			rule: Rule{Algorithm: FixedWindow, Limit: 3, Window: time.Second},
			steps: []step{
				// Cost above the limit, on a fresh key: never, and nothing
				// is stored (no window starts, nothing to reset).
				{0, 4, Result{Allowed: false, Limit: 3, Remaining: 3, ResetAfter: 0, RetryAfter: Never}},
				// The window starts at this first counted hit.
				{0, 1, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second, CountedIn: ms(0)}},
				{100 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 1, ResetAfter: 900 * time.Millisecond, CountedIn: ms(0)}},
				{200 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 800 * time.Millisecond, CountedIn: ms(0)}},
				// Full: retry when the window ends, 1s after its start.
				{300 * time.Millisecond, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 700 * time.Millisecond, RetryAfter: 700 * time.Millisecond}},
				{300 * time.Millisecond, 4, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 700 * time.Millisecond, RetryAfter: Never}},
				// A new window at its end; the two rejections counted nothing.
				{time.Second, 1, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second, CountedIn: ms(time.Second)}},
				{1500 * time.Millisecond, 2, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 500 * time.Millisecond, CountedIn: ms(time.Second)}},
				// After a gap, the window starts at the hit, not on a grid.
				{2700 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second, CountedIn: ms(2700 * time.Millisecond)}},
			},
		},
		{
			name: "sliding window",
			rule: Rule{Algorithm: SlidingWindow, Limit: 4, Window: time.Second},
			steps: []step{
				// A count in the current window matters for two windows.
				{0, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 2 * time.Second, CountedIn: ms(0)}},
				{100 * time.Millisecond, 3, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1900 * time.Millisecond, CountedIn: ms(0)}},
				// cur=4, prev=0. By hand: in the next window prev=4 and
				// 4*(1-e) + 1 <= 4 needs e >= 1/4, so 500ms to the window's
				// end + 250ms = 750ms.
				{500 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: 750 * time.Millisecond}},
				// Window 2 (start 1s), e=1/4: 4*3/4 + 0 + 1 = 4 <= 4. The
				// estimate's 3 leaves 4-1-3 = 0.
				{1250 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond, CountedIn: ms(time.Second)}},
				// By hand: 4*(1-e) + 1 + 1 <= 4 needs e >= 1/2: 250ms on.
				{1250 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond, RetryAfter: 250 * time.Millisecond}},
				// e=1/2: 4/2 + 1 + 1 = 4, admitted only because the rejection
				// above counted nothing.
				{1500 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1500 * time.Millisecond, CountedIn: ms(time.Second)}},
				{1500 * time.Millisecond, 5, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: Never}},
				// e=0.6, cur=2: 4*(1-e) + 3 <= 4 needs e >= 3/4: 150ms on.
				{1600 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1400 * time.Millisecond, RetryAfter: 150 * time.Millisecond}},
				// Window 3 (start 2s), prev=2, e=3/4: 2/4 + 1 = 1.5 <= 4;
				// remaining 4 - 1 - ceil(0.5) = 2.
				{2750 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 2, ResetAfter: 1250 * time.Millisecond, CountedIn: ms(2 * time.Second)}},
				// Two windows later everything is gone: a new window starts
				// at the hit, off the 1s grid.
				{5300 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 2 * time.Second, CountedIn: ms(5300 * time.Millisecond)}},
			},
		},
		{
			name: "token bucket",
			rule: Rule{Algorithm: TokenBucket, Limit: 2, Burst: 4, Window: time.Second},
			steps: []step{
				// Capacity 4, refilled at 2/s: one token takes 500ms back.
				{0, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 500 * time.Millisecond}},
				{0, 3, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second}},
				{0, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second, RetryAfter: 500 * time.Millisecond}},
				// Half a token back: not enough, another 250ms.
				{250 * time.Millisecond, 1, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond, RetryAfter: 250 * time.Millisecond}},
				// One token back; the two rejections took nothing.
				{500 * time.Millisecond, 1, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second}},
				{500 * time.Millisecond, 5, Result{Allowed: false, Limit: 4, Remaining: 0, ResetAfter: 2 * time.Second, RetryAfter: Never}},
				// 1.25s later 2.5 tokens are back; taking 2 leaves half a
				// token (no whole request) and 3.5 owed = 1.75s.
				{1750 * time.Millisecond, 2, Result{Allowed: true, Limit: 4, Remaining: 0, ResetAfter: 1750 * time.Millisecond}},
				// Full again long after.
				{10 * time.Second, 1, Result{Allowed: true, Limit: 4, Remaining: 3, ResetAfter: 500 * time.Millisecond}},
			},
		},
		{
			name: "token bucket, Burst 0 means Limit",
			rule: Rule{Algorithm: TokenBucket, Limit: 2, Window: time.Second},
			steps: []step{
				{0, 2, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: time.Second}},
				{0, 1, Result{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: time.Second, RetryAfter: 500 * time.Millisecond}},
				{0, 3, Result{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: time.Second, RetryAfter: Never}},
			},
		},
		{
			name: "sliding window, cost above limit on a fresh key",
			rule: Rule{Algorithm: SlidingWindow, Limit: 2, Window: time.Second},
			steps: []step{
				{0, 3, Result{Allowed: false, Limit: 2, Remaining: 2, RetryAfter: Never}},
				{0, 2, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * time.Second, CountedIn: ms(0)}},
			},
		},
		{
			name: "token bucket, cost above burst on a fresh key",
			rule: Rule{Algorithm: TokenBucket, Limit: 10, Burst: 2, Window: time.Second},
			steps: []step{
				{0, 3, Result{Allowed: false, Limit: 2, Remaining: 2, RetryAfter: Never}},
				// Refill 10/s: two tokens are back in 200ms.
				{0, 2, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 200 * time.Millisecond}},
			},
		},
		{
			// 1s + 0.5ms counts as 1001ms: the window is rounded up to
			// whole ms.
			name: "fixed window, Window rounded up to whole ms",
			rule: Rule{Algorithm: FixedWindow, Limit: 1, Window: time.Second + 500*time.Microsecond},
			steps: []step{
				{0, 1, Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 1001 * time.Millisecond, CountedIn: ms(0)}},
				{time.Second, 1, Result{Allowed: false, Limit: 1, Remaining: 0, ResetAfter: time.Millisecond, RetryAfter: time.Millisecond}},
				{1001 * time.Millisecond, 1, Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 1001 * time.Millisecond, CountedIn: ms(1001 * time.Millisecond)}},
			},
		},
		{
			// Times of a fraction of a millisecond are rounded up to the
			// next whole millisecond at which the request fits.
			name: "sliding window, whole-ms retry",
			rule: Rule{Algorithm: SlidingWindow, Limit: 3, Window: 10 * time.Second},
			steps: []step{
				{0, 3, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 20 * time.Second, CountedIn: ms(0)}},
				// Next window, prev=3: 3*(1-e/10s) + 1 <= 3 needs
				// e >= 3333.33ms, so 3334ms: 10s + 3334ms.
				{0, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 20 * time.Second, RetryAfter: 13334 * time.Millisecond}},
				// e=3333ms: 3*0.6667 + 1 = 3.0001 > 3; 1ms on. Only prev
				// counts, until its window's end; remaining 3-ceil(2.0001).
				{13333 * time.Millisecond, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 6667 * time.Millisecond, RetryAfter: time.Millisecond}},
				// e=3334ms: 3*0.6666 + 1 = 2.9998 <= 3.
				{13334 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 16666 * time.Millisecond, CountedIn: ms(10 * time.Second)}},
			},
		},
		{
			// 3 per 10s: a token every 3333.33ms, waits rounded up to
			// whole ms.
			name: "token bucket, refill of a fraction of a token per ms",
			rule: Rule{Algorithm: TokenBucket, Limit: 3, Window: 10 * time.Second},
			steps: []step{
				{0, 3, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 10 * time.Second}},
				{0, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 10 * time.Second, RetryAfter: 3334 * time.Millisecond}},
				// 0.9999 tokens back: 2.0001 owed = 6667ms (6666.33 rounded
				// up), the last 0.0001 in 1ms.
				{3333 * time.Millisecond, 1, Result{Allowed: false, Limit: 3, Remaining: 0, ResetAfter: 6667 * time.Millisecond, RetryAfter: time.Millisecond}},
				// 1.0002 back; taking 1 leaves 2.9998 owed = 9999.33ms, so
				// 10s.
				{3334 * time.Millisecond, 1, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 10 * time.Second}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			store, _, _ := newStore(t, c)
			ctx := context.Background()
			for i, s := range tt.steps {
				c.at(s.at)
				got, err := store.Take(ctx, "k", tt.rule, s.cost)
				require.NoError(t, err, "step %d", i)
				if tt.rule.Algorithm == TokenBucket && got.Allowed {
					// A bucket's CountedIn is when the request's cost will
					// have refilled: now + ResetAfter, rounded down to the ms.
					refilled := ms(s.at) + got.ResetAfter.Milliseconds()
					assert.Contains(t, []int64{refilled - 1, refilled}, got.CountedIn, "step %d", i)
					got.CountedIn = 0
				}
				assert.Equal(t, s.want, got, "step %d: cost %d at %v", i, s.cost, s.at)
			}
		})
	}
}

// Without WithClock the scripts read the server's TIME, in whole
// milliseconds, and the TTL is set from that same time.
func TestServerTime(t *testing.T) {
	store, rdb, _ := newStore(t, nil)
	ctx := context.Background()
	rule := Rule{Algorithm: FixedWindow, Limit: 2, Window: 300 * time.Millisecond}
	var first Result
	for i := range 2 {
		r, err := store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed, "take %d", i)
		if i == 0 {
			first = r
		}
	}
	// CountedIn is the window's start, the server's time in ms; the key
	// expires exactly at the window's end. PEXPIRETIME (Redis 7) is
	// computed from the server's clock read again at the SET, within the
	// same script call, so it may be a millisecond later, rarely more.
	now := time.Now().UnixMilli()
	assert.InDelta(t, now, first.CountedIn, 5000, "CountedIn %d is the server's time in ms", first.CountedIn)
	if expireAt, err := rdb.Do(ctx, "PEXPIRETIME", "k").Int64(); err == nil {
		t.Logf("CountedIn %d, PEXPIRETIME %d", first.CountedIn, expireAt)
		assert.GreaterOrEqual(t, expireAt, first.CountedIn+300)
		assert.LessOrEqual(t, expireAt, first.CountedIn+300+5)
		v, err := rdb.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, [3]int64{first.CountedIn, 2, 0}, decodeState(t, v))
	} else {
		t.Logf("no PEXPIRETIME (Redis < 7): %v", err)
	}

	r, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.Positive(t, r.RetryAfter)
	require.LessOrEqual(t, r.RetryAfter, 300*time.Millisecond)
	require.Positive(t, r.ResetAfter)
	require.LessOrEqual(t, r.ResetAfter, 300*time.Millisecond)
	assert.Zero(t, r.RetryAfter%time.Millisecond, "RetryAfter %v is whole ms", r.RetryAfter)
	assert.Zero(t, r.ResetAfter%time.Millisecond, "ResetAfter %v is whole ms", r.ResetAfter)

	time.Sleep(r.RetryAfter + 5*time.Millisecond) // real server time must pass
	r, err = store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed, "allowed again after RetryAfter")
	assert.Equal(t, int64(1), r.Remaining, "a new window")
	assert.GreaterOrEqual(t, r.CountedIn, first.CountedIn+300)
}

// stateLayouts gives, by a stored value's length, the sizes in bytes of its
// little-endian unsigned integers: a fixed window (10), a token bucket (11,
// or 13 for a large debt), a sliding window (12, or 14 for counts of 2^24
// and more).
var stateLayouts = map[int][]int{10: {6, 4}, 11: {6, 5}, 12: {6, 3, 3}, 13: {6, 7}, 14: {6, 4, 4}}

// decodeState reads a stored value into its three integers (0 for a third
// the layout does not have).
func decodeState(t *testing.T, v string) [3]int64 {
	t.Helper()
	layout, ok := stateLayouts[len(v)]
	require.True(t, ok, "value %q has no known layout", v)
	var s [3]int64
	pos := 0
	for i, size := range layout {
		var n uint64
		for j := size - 1; j >= 0; j-- {
			n = n<<8 | uint64(v[pos+j])
		}
		s[i] = int64(n)
		pos += size
	}
	return s
}

func TestDecodeState(t *testing.T) {
	// 300 = 0x012c, little-endian.
	assert.Equal(t, [3]int64{1, 300, 0}, decodeState(t, "\x01\x00\x00\x00\x00\x00\x2c\x01\x00\x00"))
	assert.Equal(t, [3]int64{1 << 40, 1, 2}, decodeState(t, "\x00\x00\x00\x00\x00\x01\x01\x00\x00\x02\x00\x00"))
}

// stateOf reads and decodes key's stored value.
func stateOf(t *testing.T, rdb *goredis.Client, key string) [3]int64 {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	require.NoError(t, err)
	return decodeState(t, v)
}

// Every write sets a TTL of exactly what the state needs (PX exp-now, in
// ms), not more; the value is the state's three integers.
func TestTTLAndStoredValue(t *testing.T) {
	const w = 10 * time.Second
	type take struct {
		at      time.Duration
		cost    int64
		refund  bool  // Refund instead of Take
		counted int64 // the refund's CountedIn
	}
	tests := []struct {
		name  string
		rule  Rule
		takes []take
		state [3]int64      // the stored value after the takes
		pttl  time.Duration // what the state needs from the last call on
	}{
		{
			name:  "fixed",
			rule:  Rule{Algorithm: FixedWindow, Limit: 5, Window: w},
			takes: []take{{at: 0, cost: 1}, {at: 4 * time.Second, cost: 2}},
			state: [3]int64{ms(0), 3, 0},
			pttl:  6 * time.Second, // to the window's end
		},
		{
			name:  "fixed, window of a fraction of a second",
			rule:  Rule{Algorithm: FixedWindow, Limit: 5, Window: 1234 * time.Millisecond},
			takes: []take{{at: 0, cost: 1}, {at: 1001 * time.Millisecond, cost: 1}},
			state: [3]int64{ms(0), 2, 0},
			pttl:  233 * time.Millisecond,
		},
		{
			name:  "fixed, refund keeps the window's end",
			rule:  Rule{Algorithm: FixedWindow, Limit: 5, Window: w},
			takes: []take{{at: 0, cost: 3}, {at: 7 * time.Second, cost: 1, refund: true, counted: ms(0)}},
			state: [3]int64{ms(0), 2, 0},
			// A refund never shortens the TTL its take set (a rule of
			// another request, a MaxFunc, may need the key that long),
			// and that TTL runs in real time: the client clock's 7 s
			// jump is not Redis's.
			pttl: w,
		},
		{
			name:  "sliding",
			rule:  Rule{Algorithm: SlidingWindow, Limit: 5, Window: w},
			takes: []take{{at: 0, cost: 2}, {at: 12 * time.Second, cost: 1}},
			// Window [10s, 20s), cur 1, prev 2: needed until 30s.
			state: [3]int64{ms(w), 1, 2},
			pttl:  18 * time.Second,
		},
		{
			name:  "sliding, only the previous window counts",
			rule:  Rule{Algorithm: SlidingWindow, Limit: 5, Window: w},
			takes: []take{{at: 0, cost: 3}, {at: 12345 * time.Millisecond, cost: 1, refund: true, counted: ms(0)}},
			// Window [10s, 20s), cur 0, prev 3 less the refund's 1: needed
			// until 20s, and kept as long as the take had it (see above).
			state: [3]int64{ms(w), 0, 2},
			pttl:  2 * w,
		},
		{
			name:  "bucket",
			rule:  Rule{Algorithm: TokenBucket, Limit: 5, Window: w},
			takes: []take{{at: 0, cost: 3}},
			// Last update at 0, debt 3 tokens = 3*window in ms; 3 tokens
			// at 5 per 10s are back after 6s.
			state: [3]int64{ms(0), 3 * w.Milliseconds(), 0},
			pttl:  6 * time.Second,
		},
		{
			name:  "bucket after a partial refill",
			rule:  Rule{Algorithm: TokenBucket, Limit: 5, Window: w},
			takes: []take{{at: 0, cost: 3}, {at: 2001 * time.Millisecond, cost: 1}},
			// 30000 - 2001*5 + 10000 = 29995: back in 5999ms.
			state: [3]int64{ms(2001 * time.Millisecond), 29995, 0},
			pttl:  5999 * time.Millisecond,
		},
		{
			name:  "bucket, debt not a whole ms of refill",
			rule:  Rule{Algorithm: TokenBucket, Limit: 3, Window: w},
			takes: []take{{at: 0, cost: 1}},
			// 10000 owed at 3 per ms: back after 3334ms (rounded up).
			state: [3]int64{ms(0), 10000, 0},
			pttl:  3334 * time.Millisecond,
		},
		{
			name: "bucket refund",
			rule: Rule{Algorithm: TokenBucket, Limit: 5, Window: w},
			// The take's CountedIn: its 30000 of debt refill at 5 a ms, by 6s.
			takes: []take{{at: 0, cost: 3}, {at: time.Second, cost: 1, refund: true, counted: ms(0) + 6000}},
			// The credit, 10000, comes off the debt as last updated (30000
			// at 0), not refilled to 1s: 20000 from 0, which refills at 5 a
			// ms by 4s; kept as long as the take had it (see above).
			state: [3]int64{ms(0), 20000, 0},
			pttl:  6 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			// The client clock stands still; only the real time since the
			// SET is off the exact TTL. PTTL read in the SET's millisecond
			// is the PX itself: try on fresh keys until one is. The PING
			// opens rdb's connection beforehand.
			require.NoError(t, rdb.Ping(ctx).Err())
			exact := false
			for attempt := 0; attempt < 20 && !exact; attempt++ {
				key := fmt.Sprintf("k%d", attempt)
				for _, tk := range tt.takes {
					c.at(tk.at)
					if tk.refund {
						require.NoError(t, store.Refund(ctx, key, tt.rule, tk.cost, tk.counted))
						continue
					}
					r, err := store.Take(ctx, key, tt.rule, tk.cost)
					require.NoError(t, err)
					require.True(t, r.Allowed)
				}
				pttl, err := rdb.PTTL(ctx, key).Result()
				require.NoError(t, err)
				require.LessOrEqual(t, pttl, tt.pttl)
				require.Greater(t, pttl, tt.pttl-min(250*time.Millisecond, tt.pttl/4), "not far below either")
				assert.Equal(t, tt.state, stateOf(t, rdb, key))
				if pttl == tt.pttl {
					exact = true
					if attempt > 0 {
						t.Logf("PTTL exact at attempt %d", attempt)
					}
				}
			}
			assert.True(t, exact, "PTTL never %v", tt.pttl)
		})
	}

	t.Run("fully refunded fixed window is deleted", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		ctx := context.Background()
		rule := Rule{Algorithm: FixedWindow, Limit: 5, Window: w}
		r, err := store.Take(ctx, "k", rule, 2)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.NoError(t, store.Refund(ctx, "k", rule, 1, r.CountedIn))
		n, err := rdb.Exists(ctx, "k").Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "one unit still counted")
		assert.Equal(t, [3]int64{ms(0), 1, 0}, stateOf(t, rdb, "k"))
		require.NoError(t, store.Refund(ctx, "k", rule, 1, r.CountedIn))
		n, err = rdb.Exists(ctx, "k").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "nothing counted, nothing stored")
	})

	t.Run("rejection writes nothing", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		ctx := context.Background()
		for _, a := range algorithms {
			rule := Rule{Algorithm: a.alg, Limit: 2, Window: w}
			_, err := store.Take(ctx, a.name, rule, 3)
			require.NoError(t, err)
		}
		n, err := rdb.DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})

	t.Run("cost 0 on a fresh key writes nothing", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		ctx := context.Background()
		for _, a := range algorithms {
			rule := Rule{Algorithm: a.alg, Limit: 2, Window: w}
			r, err := store.Take(ctx, a.name, rule, 0)
			require.NoError(t, err)
			assert.True(t, r.Allowed, a.name)
			assert.Equal(t, int64(2), r.Remaining, a.name)
			assert.Zero(t, r.ResetAfter, a.name)
		}
		n, err := rdb.DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

// assertStoreError checks an error of the Go-side validation.
func assertStoreError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "limiter: redis"), "%v", err)
}

// Limit*Window in ms (with the window rounded up, and Burst for the bucket)
// must be at most 2^51, where the scripts' doubles stay exact; beyond it
// Take and Refund fail and write nothing. Beyond what 1 ms steps carry,
// without a Step given, a rule is decided in coarser steps, and works.
func TestRuleTooLarge(t *testing.T) {
	const big = int64(1) << 31 // 2^31 * 2^20 ms = 2^51 exactly
	w := (1 << 20) * time.Millisecond
	const milli = time.Millisecond
	tooLarge := []struct {
		name string
		rule Rule
	}{
		// With a Step of 1 ms given, limit × window must fit at that step.
		{"fixed 2^31+1 per 2^20 ms at 1 ms", Rule{Algorithm: FixedWindow, Limit: big + 1, Window: w, Step: milli}},
		{"sliding 2^31+1 per 2^20 ms at 1 ms", Rule{Algorithm: SlidingWindow, Limit: big + 1, Window: w, Step: milli}},
		{"bucket 2^31+1 per 2^20 ms at 1 ms", Rule{Algorithm: TokenBucket, Limit: big + 1, Window: w, Step: milli}},
		{"bucket Burst 2^31+1 at 1 ms", Rule{Algorithm: TokenBucket, Limit: 1, Burst: big + 1, Window: w, Step: milli}},
		// 2^20 ms + 1ns is rounded up to 2^20 + 1 ms.
		{"window rounded up past the bound at 1 ms", Rule{Algorithm: FixedWindow, Limit: big, Window: w + 1, Step: milli}},
		// A count must fit its 4 bytes, whatever the step.
		{"2^32 per ms", Rule{Algorithm: FixedWindow, Limit: 1 << 32, Window: time.Millisecond}},
		{"bucket Burst 2^32", Rule{Algorithm: TokenBucket, Limit: 1, Burst: 1 << 32, Window: time.Hour}},
	}
	valid := []struct {
		name string
		rule Rule
	}{
		{"fixed 2^31 per 2^20 ms", Rule{Algorithm: FixedWindow, Limit: big, Window: w}},
		{"sliding 2^31 per 2^20 ms", Rule{Algorithm: SlidingWindow, Limit: big, Window: w}},
		{"bucket 2^31 per 2^20 ms", Rule{Algorithm: TokenBucket, Limit: big, Window: w}},
		// 2^20 - 1 ms + 1ns is rounded up to 2^20 ms.
		{"window rounded up to the bound", Rule{Algorithm: FixedWindow, Limit: big, Window: w - time.Millisecond + 1}},
		// The windows ignore Burst.
		{"fixed with a huge Burst", Rule{Algorithm: FixedWindow, Limit: 1, Burst: 1 << 62, Window: w}},
		// Beyond the bound at 1 ms, a coarser step (Step 0 picks it).
		{"fixed 2^31+1 per 2^20 ms", Rule{Algorithm: FixedWindow, Limit: big + 1, Window: w}},
		{"bucket 2^31+1 per 2^20 ms", Rule{Algorithm: TokenBucket, Limit: big + 1, Window: w}},
		{"1e9 per 30 days", Rule{Algorithm: SlidingWindow, Limit: 1_000_000_000, Window: 30 * 24 * time.Hour}},
		{"400 per 2e6 hours", Rule{Algorithm: FixedWindow, Limit: 400, Window: 2_000_000 * time.Hour}},
		{"2^32-1 per the longest Duration", Rule{Algorithm: TokenBucket, Limit: 1<<32 - 1, Window: time.Duration(math.MaxInt64)}},
	}

	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	for _, tt := range tooLarge {
		lim := max(tt.rule.Limit, tt.rule.Burst)
		require.True(t, lim >= 1<<32 || float64(lim)*float64((tt.rule.Window+time.Millisecond-1)/time.Millisecond) > float64(int64(1)<<51), tt.name)
		require.True(t, lim >= 1<<32 || tt.rule.Step == time.Millisecond, tt.name)
		t.Run(tt.name, func(t *testing.T) {
			// On a key with state: the state stays as it was.
			good := Rule{Algorithm: tt.rule.Algorithm, Limit: 5, Window: time.Second}
			key := "state:" + tt.name
			r, err := store.Take(ctx, key, good, 2)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			before, err := rdb.Get(ctx, key).Result()
			require.NoError(t, err)

			for _, k := range []string{key, "fresh:" + tt.name} {
				r, err := store.Take(ctx, k, tt.rule, 1)
				assertStoreError(t, err)
				assert.Regexp(t, "too large|too fine", err.Error())
				assert.Equal(t, Result{}, r)
				assertStoreError(t, store.Refund(ctx, k, tt.rule, 1, r.CountedIn))
			}
			after, err := rdb.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, before, after)
			n, err := rdb.Exists(ctx, "fresh:"+tt.name).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "nothing written")
		})
	}
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(len(tooLarge)), n, "only the valid rules' keys")

	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			r, err := store.Take(ctx, "valid:"+tt.name, tt.rule, tt.rule.Limit)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.Zero(t, r.Remaining)
			r, err = store.Take(ctx, "valid:"+tt.name, tt.rule, 1)
			require.NoError(t, err)
			assert.False(t, r.Allowed)
		})
	}

	// At the bound the arithmetic is still exact, to the unit and the ms.
	t.Run("exact at the bound", func(t *testing.T) {
		for _, a := range algorithms {
			if a.alg == SlidingLog {
				continue // a log's Limit is at most MaxLogLimit
			}
			t.Run(a.name, func(t *testing.T) {
				c := newClock()
				store, rdb, _ := newStore(t, c)
				rule := Rule{Algorithm: a.alg, Limit: big, Window: w}
				r, err := store.Take(ctx, "k", rule, big)
				require.NoError(t, err)
				require.True(t, r.Allowed)
				if a.alg == SlidingWindow {
					assert.Equal(t, 2*w, r.ResetAfter)
				} else {
					assert.Equal(t, w, r.ResetAfter)
				}
				r, err = store.Take(ctx, "k", rule, 1)
				require.NoError(t, err)
				require.False(t, r.Allowed)
				switch a.alg {
				case FixedWindow:
					assert.Equal(t, [3]int64{ms(0), big, 0}, stateOf(t, rdb, "k"))
					assert.Equal(t, w, r.RetryAfter)
					c.at(w - time.Millisecond)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.False(t, r.Allowed)
					c.at(w)
					r, err = store.Take(ctx, "k", rule, big)
					require.NoError(t, err)
					assert.True(t, r.Allowed)
					assert.Equal(t, [3]int64{ms(w), big, 0}, stateOf(t, rdb, "k"))
				case SlidingWindow:
					assert.Equal(t, [3]int64{ms(0), big, 0}, stateOf(t, rdb, "k"))
					// In the next window prev=2^31 weighs 2^31*(1-e/2^20 ms):
					// one unit frees at e = 2^-11 ms, so at 1ms.
					assert.Equal(t, w+time.Millisecond, r.RetryAfter)
					c.at(w)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.False(t, r.Allowed)
					c.at(w + time.Millisecond)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.True(t, r.Allowed)
					// 2^31 - 1 - ceil(2^31*(2^20-1)/2^20) = 2^11 - 1.
					assert.Equal(t, int64(1)<<11-1, r.Remaining)
					assert.Equal(t, [3]int64{ms(w), 1, big}, stateOf(t, rdb, "k"))
				case TokenBucket:
					assert.Equal(t, [3]int64{ms(0), 1 << 51, 0}, stateOf(t, rdb, "k"))
					// 2^31 tokens per 2^20 ms: 2^31 of debt refill a ms, and
					// a unit costs 2^20 of debt, so 1ms.
					assert.Equal(t, time.Millisecond, r.RetryAfter)
					c.at(time.Millisecond)
					r, err = store.Take(ctx, "k", rule, 1)
					require.NoError(t, err)
					assert.True(t, r.Allowed)
					assert.Equal(t, int64(1)<<11-1, r.Remaining)
					assert.Equal(t, w, r.ResetAfter)
					assert.Equal(t, [3]int64{ms(time.Millisecond), 1<<51 - 1<<31 + 1<<20, 0}, stateOf(t, rdb, "k"))
				}
			})
		}
	})
}

// Large but valid rules are exact: with the client clock standing still,
// exactly Limit units are admitted, from concurrent Takes.
func TestLargeRulesExact(t *testing.T) {
	tests := []struct {
		name  string
		rule  Rule
		first int64 // cost of a first Take, before the cost-1 Takes
	}{
		// Limit+5 cost-1 Takes would be 100,005 round trips; one Take of
		// Limit-10 and then 15 of cost 1 meet the limit the same way.
		{"100000 per 24h", Rule{Limit: 100_000, Window: 24 * time.Hour}, 100_000 - 10},
		// Small enough to take one by one: Limit+5 Takes of cost 1.
		{"2000 per 14 days", Rule{Limit: 2000, Window: 14 * 24 * time.Hour}, 0},
	}
	for _, tt := range tests {
		require.LessOrEqual(t, tt.rule.Limit*tt.rule.Window.Milliseconds(), int64(1)<<51, tt.name)
		for _, a := range algorithms {
			if a.alg == SlidingLog && tt.rule.Limit > MaxLogLimit {
				continue
			}
			t.Run(tt.name+"/"+a.name, func(t *testing.T) {
				rule := tt.rule
				rule.Algorithm = a.alg
				c := newClock()
				server := redistest.Start(t)
				store := New(goredis.NewClient(&goredis.Options{Addr: server.Addr(), PoolSize: 8}), WithClock(c.now))
				t.Cleanup(func() { _ = store.Close() })
				ctx := context.Background()

				admitted := int64(0)
				if tt.first > 0 {
					r, err := store.Take(ctx, "k", rule, tt.first)
					require.NoError(t, err)
					require.True(t, r.Allowed)
					assert.Equal(t, rule.Limit-tt.first, r.Remaining)
					admitted = tt.first
				}
				// The clock stands still: of the cost-1 Takes, taken from 8
				// goroutines at once, exactly as many pass as the limit has
				// left, and then Remaining is 0.
				var next, n atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 8)
				takes := rule.Limit - admitted + 5
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= takes {
							r, err := store.Take(ctx, "k", rule, 1)
							if err != nil {
								errs <- err
								return
							}
							if r.Allowed {
								n.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.Equal(t, rule.Limit, admitted+n.Load())

				// 1.5ms later, at a time with a sub-millisecond part: base
				// is at .456789ms, so the millisecond changes once.
				c.at(1500 * time.Microsecond)
				r, err := store.Take(ctx, "k", rule, 1)
				require.NoError(t, err)
				assert.False(t, r.Allowed)
				assert.Zero(t, r.Remaining)
				assert.Zero(t, r.ResetAfter%time.Millisecond, "ResetAfter %v", r.ResetAfter)
				assert.Zero(t, r.RetryAfter%time.Millisecond, "RetryAfter %v", r.RetryAfter)
				// One unit comes back every Window/Limit (864ms and
				// 604.8s), exactly.
				perUnit := rule.Window / time.Duration(rule.Limit)
				switch a.alg {
				case FixedWindow:
					assert.Equal(t, rule.Window-time.Millisecond, r.ResetAfter)
					assert.Equal(t, r.ResetAfter, r.RetryAfter)
				case SlidingWindow:
					// In the next window prev=Limit frees one unit after
					// Window/Limit.
					assert.Equal(t, 2*rule.Window-time.Millisecond, r.ResetAfter)
					assert.Equal(t, rule.Window-time.Millisecond+perUnit, r.RetryAfter)
				case TokenBucket:
					assert.Equal(t, rule.Window-time.Millisecond, r.ResetAfter)
					assert.Equal(t, perUnit-time.Millisecond, r.RetryAfter)
				}
			})
		}
	}
}

// A client clock with a sub-millisecond part counts as its whole
// millisecond: a store whose clock is truncated to the ms decides the same,
// and stores the same state. (Windows are seconds long: with the client
// clock frozen, Redis still expires keys in real time.)
func TestSubMillisecondClock(t *testing.T) {
	// base is at .456789ms: edge(k) is the first instant of the k-th
	// millisecond after base's, edge(k)-1 the last of the one before.
	edge := func(k int64) time.Duration { return time.Duration(k)*time.Millisecond - 456_789 }

	t.Run("fixed window", func(t *testing.T) {
		c := newClock()
		store, _, _ := newStore(t, c)
		ctx := context.Background()
		rule := Rule{Algorithm: FixedWindow, Limit: 1, Window: time.Second}
		r, err := store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 1, ResetAfter: time.Second, CountedIn: base.UnixMilli()}, r)
		// Later in the same millisecond: a full second to go.
		c.at(edge(1) - 1)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: false, Limit: 1, ResetAfter: time.Second, RetryAfter: time.Second}, r)
		c.at(edge(1))
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: false, Limit: 1, ResetAfter: 999 * time.Millisecond, RetryAfter: 999 * time.Millisecond}, r)
		// The window ends at the millisecond base's + 1000, 0.456789ms
		// before base + 1s.
		c.at(edge(1000) - 1)
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: false, Limit: 1, ResetAfter: time.Millisecond, RetryAfter: time.Millisecond}, r)
		c.at(edge(1000))
		r, err = store.Take(ctx, "k", rule, 1)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 1, ResetAfter: time.Second, CountedIn: base.UnixMilli() + 1000}, r)
	})

	steps := []struct {
		at   time.Duration
		cost int64
	}{
		{0, 1}, {edge(1) - 1, 2}, {edge(1), 1}, {edge(2500), 1}, {edge(5000) - 1, 2},
		{edge(5000), 1}, {edge(10000) - 1, 1}, {edge(10000), 2}, {edge(12345) + 123, 1},
		{edge(15000) - 1, 3}, {edge(20000), 1}, {edge(20001) - 1, 1}, {edge(27700), 2},
		{edge(31000), 1}, {edge(31001) - 1, 1}, {edge(55555) + 1000, 2},
	}
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			server := redistest.Start(t)
			rdb := server.Client(t)
			fine := New(server.Client(t), WithClock(c.now))
			whole := New(server.Client(t), WithClock(func() time.Time { return time.UnixMilli(c.now().UnixMilli()) }))
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Limit: 4, Burst: 5, Window: 10 * time.Second}
			allowed := 0
			for i, s := range steps {
				c.at(s.at)
				got, err := fine.Take(ctx, "fine", rule, s.cost)
				require.NoError(t, err)
				want, err := whole.Take(ctx, "whole", rule, s.cost)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d: cost %d at %v", i, s.cost, s.at)
				if got.Allowed {
					allowed++
				}
				exists, err := rdb.Exists(ctx, "fine", "whole").Result()
				require.NoError(t, err)
				if exists == 2 {
					assert.Equal(t, rdb.Get(ctx, "whole").Val(), rdb.Get(ctx, "fine").Val(), "step %d", i)
				} else {
					assert.Zero(t, exists, "step %d: both stored or neither", i)
				}
			}
			t.Logf("%d of %d admitted", allowed, len(steps))
			assert.Positive(t, allowed)
			assert.Less(t, allowed, len(steps), "some rejected")
		})
	}
}

func TestInvalidRule(t *testing.T) {
	store, rdb, _ := newStore(t, nil)
	ctx := context.Background()
	tests := []struct {
		name string
		rule Rule
	}{
		{"algorithm 0", Rule{Limit: 1, Window: time.Second}},
		{"algorithm 5", Rule{Algorithm: SlidingLog + 1, Limit: 1, Window: time.Second}},
		{"a log of 10001", Rule{Algorithm: SlidingLog, Limit: MaxLogLimit + 1, Window: time.Second}},
		{"limit 0", Rule{Algorithm: FixedWindow, Window: time.Second}},
		{"limit -1", Rule{Algorithm: SlidingWindow, Limit: -1, Window: time.Second}},
		{"window 0", Rule{Algorithm: TokenBucket, Limit: 1}},
		{"window -1s", Rule{Algorithm: TokenBucket, Limit: 1, Window: -time.Second}},
		{"window of 1ms less 1ns", Rule{Algorithm: FixedWindow, Limit: 1, Window: time.Millisecond - 1}},
		{"window of 1ns", Rule{Algorithm: SlidingWindow, Limit: 1, Window: 1}},
		{"limit × window above 2^51", Rule{Algorithm: FixedWindow, Limit: 1 << 40, Window: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := store.Take(ctx, "k", tt.rule, 1)
			assertStoreError(t, err)
			assert.Equal(t, Result{}, r)
			assertStoreError(t, store.Refund(ctx, "k", tt.rule, 1, 0))
		})
	}
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was written")

	// The smallest valid window works.
	r, err := store.Take(ctx, "k", Rule{Algorithm: FixedWindow, Limit: 1, Window: time.Millisecond}, 1)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
}

// A negative cost is an error for Take and Refund, and changes nothing: it

// Extreme costs and countedIn values, which the request's packed form clamps
// (a cost to quota+1, countedIn to [0, 2^56)), decide as the unclamped
// values would: a cost above the quota is never admitted and writes
// nothing, a refund of a huge cost empties the key's count, and a countedIn
// no script returned credits nothing in a window.
func TestExtremeCostAndCountedIn(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Limit: 3, Window: time.Second}

			for _, cost := range []int64{4, 1 << 32, 1<<63 - 1} {
				r, err := store.Take(ctx, "k", rule, cost)
				require.NoError(t, err)
				assert.False(t, r.Allowed, "cost %d", cost)
				assert.Equal(t, Never, r.RetryAfter, "cost %d", cost)
				assert.Equal(t, int64(3), r.Remaining, "cost %d", cost)
			}
			n, err := rdb.Exists(ctx, "k").Result()
			require.NoError(t, err)
			assert.Zero(t, n, "a rejected cost writes nothing")

			r, err := store.Take(ctx, "k", rule, 3)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			for _, countedIn := range []int64{-1, -1 << 63, 1<<63 - 1} {
				require.NoError(t, store.Refund(ctx, "k", rule, 1, countedIn))
			}
			r2, err := store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			if a.alg == TokenBucket {
				// A countedIn far in the future says the cost has not
				// refilled: its refund credits it.
				assert.True(t, r2.Allowed, "the far-future refund credited one token")
			} else {
				assert.False(t, r2.Allowed, "no window matched: nothing credited")
			}
			if r2.Allowed {
				require.NoError(t, store.Refund(ctx, "k", rule, 1, r2.CountedIn))
			}

			require.NoError(t, store.Refund(ctx, "k", rule, 1<<63-1, r.CountedIn))
			r, err = store.Take(ctx, "k", rule, 3)
			require.NoError(t, err)
			assert.True(t, r.Allowed, "a refund of a huge cost gave the whole quota back")
		})
	}
}

// would otherwise credit units a Take never took.
func TestNegativeCost(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Limit: 3, Window: time.Second}
			r, err := store.Take(ctx, "k", rule, 3)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			counted := r.CountedIn
			before, err := rdb.Get(ctx, "k").Result()
			require.NoError(t, err)

			for _, cost := range []int64{-1, -3, -1 << 62} {
				for _, key := range []string{"k", "fresh"} {
					r, err := store.Take(ctx, key, rule, cost)
					assertStoreError(t, err)
					assert.Contains(t, err.Error(), "negative")
					assert.Equal(t, Result{}, r)
					err = store.Refund(ctx, key, rule, cost, counted)
					assertStoreError(t, err)
					assert.Contains(t, err.Error(), "negative")
				}
			}
			after, err := rdb.Get(ctx, "k").Result()
			require.NoError(t, err)
			assert.Equal(t, before, after, "state unchanged")
			n, err := rdb.DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "nothing written for the fresh key")
			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			assert.False(t, r.Allowed, "still full")
		})
	}
}

func TestServerDown(t *testing.T) {
	server := redistest.Start(t)
	// No retries, so that each failing call is quick.
	client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	store := New(client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rule := Rule{Algorithm: FixedWindow, Limit: 1, Window: time.Second}
	_, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)

	server.Stop()
	for _, a := range algorithms {
		rule := Rule{Algorithm: a.alg, Limit: 1, Window: time.Second}
		var r Result
		require.NotPanics(t, func() { r, err = store.Take(ctx, "k", rule, 1) })
		require.Error(t, err, a.name)
		assert.True(t, strings.HasPrefix(err.Error(), "limiter: redis take"), "%v", err)
		assert.Equal(t, Result{}, r)
		require.NotPanics(t, func() { err = store.Refund(ctx, "k", rule, 1, 0) })
		require.Error(t, err, a.name)
		assert.True(t, strings.HasPrefix(err.Error(), "limiter: redis refund"), "%v", err)
	}
}

func TestRefund(t *testing.T) {
	ctx := context.Background()

	t.Run("fixed window", func(t *testing.T) {
		c := newClock()
		store, rdb, _ := newStore(t, c)
		rule := Rule{Algorithm: FixedWindow, Limit: 3, Window: time.Second}
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
		rule := Rule{Algorithm: SlidingWindow, Limit: 4, Window: time.Second}
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
		rule := Rule{Algorithm: TokenBucket, Limit: 1, Burst: 3, Window: time.Second}
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

func TestFiberStorage(t *testing.T) {
	server := redistest.Start(t)
	store := New(server.Client(t))
	rdb := server.Client(t)
	ctx := context.Background()

	require.NoError(t, store.Set("a", []byte("va"), time.Minute))
	got, err := store.Get("a")
	require.NoError(t, err)
	assert.Equal(t, []byte("va"), got)
	pttl, err := rdb.PTTL(ctx, "a").Result()
	require.NoError(t, err)
	assert.Positive(t, pttl)
	assert.LessOrEqual(t, pttl, time.Minute)

	require.NoError(t, store.Set("b", []byte("vb"), 0))
	pttl, err = rdb.PTTL(ctx, "b").Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), pttl, "no expiry")

	got, err = store.Get("missing")
	assert.NoError(t, err)
	assert.Nil(t, got)

	require.NoError(t, store.Delete("a"))
	got, err = store.Get("a")
	assert.NoError(t, err)
	assert.Nil(t, got)
	require.NoError(t, store.Delete("a"), "deleting a missing key is fine")

	require.NoError(t, store.Reset())
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	require.NoError(t, store.Close())
	_, err = store.Get("b")
	assert.Error(t, err, "closed")
	assert.Same(t, store.Conn(), store.client)
}

// SCRIPT FLUSH loses the cached scripts; the next Take falls back to EVAL
// and carries on with the same state.
func TestScriptFlush(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rule := Rule{Algorithm: a.alg, Limit: 3, Window: time.Minute}
			r, err := store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			require.Equal(t, int64(2), r.Remaining)

			require.NoError(t, rdb.ScriptFlush(ctx).Err())
			exists, err := rdb.ScriptExists(ctx, scripts[a.alg].Hash()).Result()
			require.NoError(t, err)
			require.Equal(t, []bool{false}, exists)

			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.Equal(t, int64(1), r.Remaining, "state kept")
			exists, err = rdb.ScriptExists(ctx, scripts[a.alg].Hash()).Result()
			require.NoError(t, err)
			assert.Equal(t, []bool{true}, exists, "EVAL cached it again")

			r, err = store.Take(ctx, "k", rule, 1)
			require.NoError(t, err)
			assert.True(t, r.Allowed)
			assert.Zero(t, r.Remaining)
		})
	}
}

// commandStats parses INFO commandstats into calls per command.
func commandStats(t *testing.T, rdb *goredis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, line)
				stats[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return stats
}

// sentCounter counts the commands a client sends, by name.
// sentCounter counts the commands a client sends, by name, whether alone or
// in a pipeline, and the round trips: commands sent alone, and pipelines.
type sentCounter struct {
	mu         sync.Mutex
	sent       map[string]int
	roundTrips int
}

func (h *sentCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *sentCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		h.sent[cmd.Name()]++
		h.roundTrips++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *sentCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.mu.Lock()
		for _, cmd := range cmds {
			h.sent[cmd.Name()]++
		}
		h.roundTrips++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// One round trip per decision: 100 Takes one after another on a fresh
// server are 100 EVALSHA, plus one EVAL after the first one's NOSCRIPT,
// each its own round trip, pipelined (a pipeline of one) or not.
func TestCommandsPerDecision(t *testing.T) {
	for _, a := range algorithms {
		for _, serverTime := range []bool{false, true} {
			for _, pipelined := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/server time %v/pipelined %v", a.name, serverTime, pipelined), func(t *testing.T) {
					server := redistest.Start(t)
					rdb := server.Client(t)
					// With ContextTimeoutEnabled, so that the Store calls
					// through the client itself, whose hook counts.
					client := goredis.NewClient(&goredis.Options{Addr: server.Addr(), ContextTimeoutEnabled: true})
					t.Cleanup(func() { _ = client.Close() })
					counter := &sentCounter{sent: map[string]int{}}
					client.AddHook(counter)
					var opts []Option
					if !serverTime {
						c := newClock()
						opts = append(opts, WithClock(c.now))
					}
					if !pipelined {
						opts = append(opts, WithoutPipelining())
					}
					store := New(client, opts...)
					ctx := context.Background()
					// Open the store's connection before the stats are reset, so
					// that its handshake (HELLO, CLIENT SETINFO) is not counted.
					require.NoError(t, client.Ping(ctx).Err())
					require.NoError(t, rdb.ConfigResetStat(ctx).Err())
					counter.mu.Lock()
					clear(counter.sent)
					counter.roundTrips = 0
					counter.mu.Unlock()

					rule := Rule{Algorithm: a.alg, Limit: 50, Window: time.Minute}
					for range 100 {
						_, err := store.Take(ctx, "k", rule, 1)
						require.NoError(t, err)
					}
					stats := commandStats(t, rdb)
					t.Logf("commandstats calls: %v; client sent: %v", stats, counter.sent)
					if info, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
						for _, line := range strings.Split(info, "\n") {
							if strings.HasPrefix(line, "cmdstat_eval") {
								t.Log(strings.TrimSpace(line))
							}
						}
					}

					assert.Equal(t, map[string]int{"evalsha": 100, "eval": 1}, counter.sent, "client side")
					assert.Equal(t, 101, counter.roundTrips)
					assert.Equal(t, int64(100), stats["evalsha"])
					assert.LessOrEqual(t, stats["eval"]+stats["script|load"], int64(1))
					// The rest are the stats calls and what the scripts call
					// inside Redis (GET, SET, TIME): no other round trips.
					for name, n := range stats {
						switch name {
						case "evalsha", "eval", "script|load", "config|resetstat", "info":
						case "get":
							assert.Equal(t, int64(100), n, name)
						case "set":
							assert.LessOrEqual(t, n, int64(100), name)
						case "time":
							if serverTime {
								assert.Equal(t, int64(100), n, name)
							} else {
								assert.Fail(t, "TIME called with a client clock")
							}
						default:
							assert.Fail(t, "unexpected command", "%s: %d calls", name, n)
						}
					}
				})
			}
		}
	}
}

// One limited key takes at most 100 bytes of Redis memory (MEMORY USAGE
// with SAMPLES 0: the whole value), after a few Takes at the server's time.
func TestMemoryUsage(t *testing.T) {
	server := redistest.Start(t)
	store := New(server.Client(t))
	rdb := server.Client(t)
	ctx := context.Background()
	for _, tt := range []struct {
		key   string
		rule  Rule
		costs []int64
	}{
		{"limiter:fw:203.0.113.7", Rule{Algorithm: FixedWindow, Limit: 1000, Window: time.Minute}, []int64{1, 200, 299}},
		{"limiter:sw:203.0.113.7", Rule{Algorithm: SlidingWindow, Limit: 1000, Window: time.Minute}, []int64{1, 200, 299}},
		{"limiter:tb:203.0.113.7", Rule{Algorithm: TokenBucket, Limit: 1000, Burst: 2000, Window: time.Hour}, []int64{1, 700, 799}},
	} {
		for _, cost := range tt.costs {
			r, err := store.Take(ctx, tt.key, tt.rule, cost)
			require.NoError(t, err)
			require.True(t, r.Allowed)
		}
		v, err := rdb.Get(ctx, tt.key).Result()
		require.NoError(t, err)
		n, err := rdb.MemoryUsage(ctx, tt.key, 0).Result()
		require.NoError(t, err)
		t.Logf("MEMORY USAGE %s SAMPLES 0 = %d bytes (value %x = %v, %d bytes)", tt.key, n, v, decodeState(t, v), len(v))
		assert.LessOrEqual(t, n, int64(100), tt.key)
	}
}

// A bucket refund gives back only what of the cost has not refilled yet:
// a request that failed after the bucket refilled earns nothing back, so
// the requests after it cannot exceed the capacity.
func TestBucketRefundAfterRefill(t *testing.T) {
	c := newClock()
	store, _, _ := newStore(t, c)
	ctx := context.Background()
	rule := Rule{Algorithm: TokenBucket, Limit: 1, Burst: 1, Window: time.Second}
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
