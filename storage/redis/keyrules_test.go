package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key written without BlockFor or MinInterval and then taken with them
// (a deploy that turns them on) keeps its counts and is not blocked: its
// value's last bytes are counts, not a block's end. Each algorithm, one
// limit and two, with counts whose bytes would read as a time ahead.
func TestKeyRulesReadAPlainValue(t *testing.T) {
	server := redistest.Start(t)
	// A clock that stands still: a bucket of 2^30 an hour refills ~300
	// units a millisecond, which a loaded machine's delay would show.
	store := New(server.Client(t), WithClock(newClock().now)).engine
	ctx := context.Background()
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
		for _, n := range []int{1, 2} {
			limit, cost := int64(1<<30), int64(1<<29)
			if alg == SlidingLog {
				// A log value's counts lead each part; a key's logs hold
				// MaxLogLimit entries in all.
				limit, cost = MaxLogLimit/int64(n), MaxLogLimit/int64(2*n)
			}
			plain := []Rule{{Algorithm: alg, Max: limit, Expiration: time.Hour}, {Algorithm: alg, Max: 2 * limit, Expiration: 2 * time.Hour}}[:n]
			if alg == SlidingLog {
				plain[n-1].Max = limit
			}
			keyed := append([]Rule(nil), plain...)
			keyed[0].BlockFor, keyed[0].MinInterval = time.Hour, time.Millisecond
			key := "plain:" + strconv.Itoa(int(alg)) + ":" + strconv.Itoa(n)
			results := make([]Result, n)
			_, err := store.TakeAll(ctx, key, plain, cost, results) // counts whose bytes are large
			require.NoError(t, err)
			spent := results[0].Remaining
			ok, err := store.TakeAll(ctx, key, keyed, 1, results)
			require.NoError(t, err)
			assert.True(t, ok, "algorithm %d, %d limits: not blocked", alg, n)
			assert.Equal(t, spent-1, results[0].Remaining, "algorithm %d, %d limits: the counts are kept", alg, n)
		}
	}
}

// A value shorter than the key rules' suffix, or of any length near it,
// is no state of ours and fails no call: every algorithm, one limit and
// two, batched and not, with BlockFor and MinInterval.
func TestKeyRulesReadShortValues(t *testing.T) {
	server := redistest.Start(t)
	rdb := server.Client(t)
	ctx := context.Background()
	for _, opts := range [][]Option{nil, {WithoutBatching()}} {
		store := New(server.Client(t), opts...).engine
		for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog} {
			for _, n := range []int{1, 2} {
				rules := []Rule{{Algorithm: alg, Max: 5, Expiration: time.Minute}, {Algorithm: alg, Max: 9, Expiration: time.Hour}}[:n]
				rules[0].BlockFor, rules[0].MinInterval = time.Minute, time.Millisecond
				results := make([]Result, n)
				for size := range 16 {
					key := "short:" + strconv.Itoa(int(alg)) + ":" + strconv.Itoa(n) + ":" + strconv.Itoa(size) + ":" + strconv.Itoa(len(opts))
					require.NoError(t, rdb.Set(ctx, key, strings.Repeat("\x05", size), 0).Err())
					// Several at once, so that a batch holds them.
					var wg sync.WaitGroup
					for range 4 {
						wg.Go(func() {
							_, err := store.TakeAll(ctx, key, rules, 1, make([]Result, n))
							assert.NoError(t, err, "algorithm %d, %d limits, %d bytes", alg, n, size)
						})
					}
					wg.Wait()
					_, err := store.TakeAll(ctx, key, rules, 0, results)
					require.NoError(t, err)
					ttl, err := rdb.PTTL(ctx, key).Result()
					require.NoError(t, err)
					assert.Positive(t, ttl, "algorithm %d, %d limits, %d bytes: the key ends", alg, n, size)
				}
			}
		}
	}
}
