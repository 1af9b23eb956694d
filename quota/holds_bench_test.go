package quota

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchHolds takes from an in-memory limiter on many goroutines, over 1024
// keys, while holds keys (none of them taken) are blocked: the cost the
// holds add to every take, against BenchmarkHoldsTakeNoHold in the same
// run.
func benchHolds(b *testing.B, holds int) {
	l, err := New(Config{Limits: []Limit{PerSecond(1 << 30)}, MaxKeys: 1 << 16})
	require.NoError(b, err)
	ctx := context.Background()
	for i := range holds {
		_, err := l.Block(ctx, "held-"+strconv.Itoa(i), time.Hour)
		require.NoError(b, err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(97))
		for pb.Next() {
			i++
			_, _ = l.Take(ctx, keys[i&1023], 1)
		}
	})
}

func BenchmarkHoldsTakeNoHold(b *testing.B)    { benchHolds(b, 0) }
func BenchmarkHoldsTakeOneHold(b *testing.B)   { benchHolds(b, 1) }
func BenchmarkHoldsTakeManyHolds(b *testing.B) { benchHolds(b, 10000) }
