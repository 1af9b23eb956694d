package quota

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Odd keys and edge lengths of Block, in memory and on Redis: a key of
// braces, colons or binary bytes is held, and only it (not a key it might
// share a hash tag or a prefix with); a Block of 1ns holds for a ms, one
// of 365 days for the whole of it, and 365 days + 1ns is refused.
func TestBlockOddKeysAndLengths(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, onRedis := range []bool{false, true} {
		cfg := Config{Limits: []Limit{PerMinute(3)}, Name: "odd", StorageTimeout: slowMachine}
		if onRedis {
			cfg.Redis = srv.Client(t)
		}
		l, err := New(cfg)
		require.NoError(t, err)
		for _, key := range []string{"{a}", "{a}:b", "a:", ":", "}{", "\x00\xff\x00", strings.Repeat("k", 100000)} {
			st, err := l.Block(ctx, key, 365*24*time.Hour)
			require.NoError(t, err, "%q", key)
			assert.Equal(t, 365*24*time.Hour, st.Held, "redis=%v %.10q", onRedis, key)
			res, err := l.Take(ctx, key, 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed(), "redis=%v %.10q held", onRedis, key)
			assert.GreaterOrEqual(t, res.RetryAfter(), 364*24*time.Hour)
			for _, other := range []string{"a", "{a}x", key + "x", key[:len(key)-1]} {
				if other == key || other == "" {
					continue
				}
				st, err := l.Peek(ctx, other)
				require.NoError(t, err)
				assert.False(t, st.Blocked(), "redis=%v %.10q held by the Block of %.10q", onRedis, other, key)
			}
			require.NoError(t, l.Reset(ctx, key))
			requireAllowed(t, l, key)
		}
		st, err := l.Block(ctx, "ns", time.Nanosecond)
		require.NoError(t, err)
		assert.Equal(t, time.Millisecond, st.Held, "redis=%v 1ns rounds up to a ms", onRedis)
		time.Sleep(5 * time.Millisecond)
		requireAllowed(t, l, "ns")
		_, err = l.Block(ctx, "k", 365*24*time.Hour+time.Nanosecond)
		assert.ErrorContains(t, err, "limiter: Block: d is")
	}
}

// Block on a Redis value that is not the limiter's: a hash is a clear
// error that leaves it; garbage bytes are held (the garbage read as what
// it can be), and Reset clears both.
func TestBlockForeignValues(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.name(), func(t *testing.T) {
			name := "foreign" + alg.name()
			l, err := New(Config{Algorithm: alg, Limits: []Limit{PerMinute(3)}, Name: name, Redis: srv.Client(t), FailurePolicy: FailError, StorageTimeout: slowMachine})
			require.NoError(t, err)
			requireAllowed(t, l, "h")
			requireAllowed(t, l, "g")
			var hkey, gkey string
			for _, k := range rdb.Keys(ctx, "*").Val() {
				switch {
				case strings.Contains(k, name) && strings.HasSuffix(k, "h"):
					hkey = k
				case strings.Contains(k, name) && strings.HasSuffix(k, "g"):
					gkey = k
				}
			}
			require.NotEmpty(t, hkey)
			require.NotEmpty(t, gkey)
			require.NoError(t, rdb.Del(ctx, hkey).Err())
			require.NoError(t, rdb.HSet(ctx, hkey, "f", "v").Err())
			_, err = l.Block(ctx, "h", time.Hour)
			assert.ErrorContains(t, err, "limiter:")
			assert.Equal(t, "hash", rdb.Type(ctx, hkey).Val(), "left as it was")
			require.NoError(t, l.Reset(ctx, "h"))
			requireAllowed(t, l, "h")

			for _, junk := range []string{"", "x", strings.Repeat("\xff", 13), strings.Repeat("\xff", 40), strings.Repeat("\x00", 24)} {
				require.NoError(t, rdb.Set(ctx, gkey, junk, 0).Err())
				st, err := l.Block(ctx, "g", time.Hour)
				require.NoError(t, err, "%q", junk)
				assert.Greater(t, st.Held, 59*time.Minute)
				res, err := l.Take(ctx, "g", 1)
				require.NoError(t, err)
				assert.False(t, res.Allowed(), "%q: the hold holds", junk)
				ttl := rdb.PTTL(ctx, gkey).Val()
				assert.Greater(t, ttl, 59*time.Minute, "%q: kept as long as the hold", junk)
				require.NoError(t, l.Reset(ctx, "g"))
				requireAllowed(t, l, "g")
			}
		})
	}
}

// An in-memory limiter keeps at most MaxKeys holds: Blocks of ever new
// keys beyond it get an error, the keys held before stay held, and once
// the holds have ended new ones are kept again.
func TestBlockHoldsAreBounded(t *testing.T) {
	now := newSettableNow()
	l, err := New(Config{Limits: []Limit{PerMinute(3)}, MaxKeys: 512, Now: now.Now})
	require.NoError(t, err)
	ctx := context.Background()
	kept, refused := 0, 0
	for i := range 20000 {
		_, err := l.Block(ctx, "attacker-"+strconv.Itoa(i), time.Minute)
		if err != nil {
			assert.ErrorContains(t, err, "limiter: Block: as many keys are blocked already as MaxKeys allows")
			refused++
			continue
		}
		kept++
	}
	assert.LessOrEqual(t, kept, 512+shardCount, "at most MaxKeys (rounded up per shard)")
	assert.Positive(t, refused)
	st, err := l.Peek(ctx, "attacker-0")
	require.NoError(t, err)
	assert.True(t, st.Blocked(), "a key held before stays held")
	now.Add(time.Minute)
	_, err = l.Block(ctx, "attacker-x", time.Minute)
	assert.NoError(t, err, "ended holds make room")
}
