package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
			rule:  Rule{Algorithm: FixedWindow, Max: 5, Expiration: w},
			takes: []take{{at: 0, cost: 1}, {at: 4 * time.Second, cost: 2}},
			state: [3]int64{ms(0), 3, 0},
			pttl:  6 * time.Second, // to the window's end
		},
		{
			name:  "fixed, window of a fraction of a second",
			rule:  Rule{Algorithm: FixedWindow, Max: 5, Expiration: 1234 * time.Millisecond},
			takes: []take{{at: 0, cost: 1}, {at: 1001 * time.Millisecond, cost: 1}},
			state: [3]int64{ms(0), 2, 0},
			pttl:  233 * time.Millisecond,
		},
		{
			name:  "fixed, refund keeps the window's end",
			rule:  Rule{Algorithm: FixedWindow, Max: 5, Expiration: w},
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
			rule:  Rule{Algorithm: SlidingWindow, Max: 5, Expiration: w},
			takes: []take{{at: 0, cost: 2}, {at: 12 * time.Second, cost: 1}},
			// Window [10s, 20s), cur 1, prev 2: needed until 30s.
			state: [3]int64{ms(w), 1, 2},
			pttl:  18 * time.Second,
		},
		{
			name:  "sliding, only the previous window counts",
			rule:  Rule{Algorithm: SlidingWindow, Max: 5, Expiration: w},
			takes: []take{{at: 0, cost: 3}, {at: 12345 * time.Millisecond, cost: 1, refund: true, counted: ms(0)}},
			// Window [10s, 20s), cur 0, prev 3 less the refund's 1: needed
			// until 20s, and kept as long as the take had it (see above).
			state: [3]int64{ms(w), 0, 2},
			pttl:  2 * w,
		},
		{
			name:  "bucket",
			rule:  Rule{Algorithm: TokenBucket, Max: 5, Expiration: w},
			takes: []take{{at: 0, cost: 3}},
			// Last update at 0, debt 3 tokens = 3*window in ms; 3 tokens
			// at 5 per 10s are back after 6s.
			state: [3]int64{ms(0), 3 * w.Milliseconds(), 0},
			pttl:  6 * time.Second,
		},
		{
			name:  "bucket after a partial refill",
			rule:  Rule{Algorithm: TokenBucket, Max: 5, Expiration: w},
			takes: []take{{at: 0, cost: 3}, {at: 2001 * time.Millisecond, cost: 1}},
			// 30000 - 2001*5 + 10000 = 29995: back in 5999ms.
			state: [3]int64{ms(2001 * time.Millisecond), 29995, 0},
			pttl:  5999 * time.Millisecond,
		},
		{
			name:  "bucket, debt not a whole ms of refill",
			rule:  Rule{Algorithm: TokenBucket, Max: 3, Expiration: w},
			takes: []take{{at: 0, cost: 1}},
			// 10000 owed at 3 per ms: back after 3334ms (rounded up).
			state: [3]int64{ms(0), 10000, 0},
			pttl:  3334 * time.Millisecond,
		},
		{
			name: "bucket refund",
			rule: Rule{Algorithm: TokenBucket, Max: 5, Expiration: w},
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
		rule := Rule{Algorithm: FixedWindow, Max: 5, Expiration: w}
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
			rule := Rule{Algorithm: a.alg, Max: 2, Expiration: w}
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
			rule := Rule{Algorithm: a.alg, Max: 2, Expiration: w}
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

// One limited key takes at most 100 bytes of Redis memory (MEMORY USAGE
// with SAMPLES 0: the whole value), after a few Takes at the server's time.
func TestMemoryUsage(t *testing.T) {
	server := redistest.Start(t)
	store := New(server.Client(t)).engine
	rdb := server.Client(t)
	ctx := context.Background()
	for _, tt := range []struct {
		key   string
		rule  Rule
		costs []int64
	}{
		{"limiter:fw:203.0.113.7", Rule{Algorithm: FixedWindow, Max: 1000, Expiration: time.Minute}, []int64{1, 200, 299}},
		{"limiter:sw:203.0.113.7", Rule{Algorithm: SlidingWindow, Max: 1000, Expiration: time.Minute}, []int64{1, 200, 299}},
		{"limiter:tb:203.0.113.7", Rule{Algorithm: TokenBucket, Max: 1000, Burst: 2000, Expiration: time.Hour}, []int64{1, 700, 799}},
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
