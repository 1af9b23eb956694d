package quota

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// MaxKeys as large as an int holds is a cap that is never met, not one
// that wraps around to a key a shard: a key stays tracked however many
// others come.
func TestHugeMaxKeys(t *testing.T) {
	for _, maxKeys := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt / 2} {
		l, err := New(Config{Limits: []Limit{{Max: 1, Expiration: time.Hour}}, MaxKeys: maxKeys})
		require.NoError(t, err)
		ctx := context.Background()
		first, err := l.Take(ctx, "victim", 1)
		require.NoError(t, err)
		require.True(t, first.Allowed())
		for i := range 5000 {
			_, err := l.Take(ctx, "k"+strconv.Itoa(i), 1)
			require.NoError(t, err)
		}
		again, err := l.Take(ctx, "victim", 1)
		require.NoError(t, err)
		assert.False(t, again.Allowed(), "MaxKeys %d: the victim is still counted", maxKeys)
	}
}

// Under SlidingLog the keys kept fill the shards' caps evenly and their
// logs fit logMemory, spare room included: a whole number of keys a
// shard, and a shard's logs never grow past its cap.
func TestSlidingLogMemoryBound(t *testing.T) {
	for _, maxes := range [][]int64{{10_000}, {100}, {100, 1000}, {10_000, 10_000, 10_000, 10_000}} {
		var ls limits
		perKey := int64(64)
		for i, m := range maxes {
			ls.r[i].max = m
			perKey += 8 * m
		}
		ls.n = len(maxes)
		keys := memoryKeys(SlidingLog, &ls, DefaultMaxKeys)
		assert.Zero(t, keys%shardCount, "%v: a whole number of keys a shard", maxes)
		assert.LessOrEqual(t, int64(keys)*perKey, int64(logMemory), "%v", maxes)

		stride := 0
		for _, m := range maxes {
			stride += int(m)
		}
		s := &shard{limit: keys / shardCount, logStride: stride}
		for range s.limit {
			s.growLogs()
		}
		assert.Equal(t, s.limit*stride, len(s.logs))
		assert.Equal(t, s.limit*stride, cap(s.logs), "%v: no spare room in a full shard", maxes)
	}
}
