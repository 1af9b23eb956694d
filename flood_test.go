package limiter

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// floodKeys writes random keys into one reused buffer: key i is n bytes
// (n uniform in minLen..200), random except that, when there is room, its
// first 4 bytes are i, so keys of 4 bytes or more are all distinct. The
// returned string is only valid until the next call, like a key read from
// a request header; the manager copies what it keeps.
type floodKeys struct {
	rng    *rand.ChaCha8
	minLen int
	buf    [200]byte
}

func newFloodKeys(seed byte, minLen int) *floodKeys {
	return &floodKeys{rng: rand.NewChaCha8([32]byte{seed}), minLen: minLen}
}

func (f *floodKeys) key(i int) string {
	n := f.minLen + int(f.rng.Uint64()%uint64(len(f.buf)-f.minLen+1))
	_, _ = f.rng.Read(f.buf[:n])
	if n >= 4 {
		binary.LittleEndian.PutUint32(f.buf[:4], uint32(i))
	}
	return unsafe.String(&f.buf[0], n)
}

// TestFloodOfRandomKeysIsBounded floods managers with a small MaxKeys
// (4096) with 300,000 random keys of 1 to 200 bytes, 100,000 for each
// algorithm, and shows the bound Config.MaxKeys documents: no shard ever
// holds more than ceil(MaxKeys/256) keys, so the manager never tracks more
// than MaxKeys, and the live heap the manager holds afterwards stays within
// the documented cost of MaxKeys keys (about 64 bytes each plus at most 64
// key bytes, a longer key being kept as its 32-byte digest) plus a fixed
// overhead, far below what keeping every key of the flood would take. The
// clock stands still, so no key expires and the cap alone must bound the
// memory.
func TestFloodOfRandomKeysIsBounded(t *testing.T) {
	const (
		maxKeys  = 4096
		perShard = (maxKeys + shardCount - 1) / shardCount // 16, the documented per-shard cap
		flood    = 100_000                                 // per algorithm: 24 times the cap in every shard
		// The clock stands still, so no entry ever expires and compaction
		// drops none: a shard's key count never falls, and its largest
		// value is the one seen at the next check.
		checkEvery = 10_000
		// Heap bound. Documented: about 64 B a key (a 40-byte entry, index
		// slots at most 3/4 full, entry-array slack) plus its stored
		// bytes, at most maxInlineKey = 64 (a longer key is a 32-byte
		// digest): 128 B × 4096 keys = 512 KiB. Fixed overhead, 4 KiB a
		// shard, 1 MiB in all: a shard's arena (at most 16 × 64 B live)
		// also holds the bytes of the keys evicted since its last
		// compaction (at most 16 × 64 B: at the cap it compacts once per
		// 16 inserts) and its append capacity, up to double, and the
		// manager itself is 256 shards of about 128 B. Bound: 1.5 MiB.
		// Keeping the whole flood would take 100,000 × (64 + ~32 B of
		// stored key) ≈ 9.6 MB, over 6 times the bound, and so would a
		// cap 4 times too loose (16,384 × 128 B = 2 MiB).
		perKey    = 64 + maxInlineKey
		overhead  = shardCount * 4 << 10
		heapBound = maxKeys*perKey + overhead
	)
	tests := []struct {
		name string
		alg  algorithm
	}{
		{"FixedWindow", algFixed},
		{"SlidingWindow", algSliding},
		{"TokenBucket", algToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock testClock
			clock.advance(time.Hour)
			r := rule{limit: 3, burst: 3, window: minute}
			keys := newFloodKeys(byte(tt.alg), 1)
			ctx := context.Background()

			before := liveHeap()
			m := newManager(tt.alg, 1, maxKeys, clock.millis)
			for i := range flood {
				if _, err := takeRule(m, ctx, keys.key(i), r, 1); err != nil {
					require.NoError(t, err, "take %d", i)
				}
				if (i+1)%checkEvery == 0 {
					requireShardsCapped(t, m, perShard, i+1)
				}
			}
			tracked := m.len()
			after := liveHeap()
			runtime.KeepAlive(m)

			require.LessOrEqual(t, tracked, maxKeys)
			require.Greater(t, tracked, maxKeys*3/4, "the flood must have filled the manager to its cap")
			held := int64(after) - int64(before)
			t.Logf("%d keys tracked after %d, heap held %d B (%.0f B a key), bound %d B", tracked, flood, held, float64(held)/float64(tracked), heapBound)
			require.Less(t, held, int64(heapBound), "live heap of a manager capped at %d keys", maxKeys)
			checkIndex(t, m)
		})
	}
}

// requireShardsCapped fails the test if any shard holds more than perShard
// keys after the given number of takes.
func requireShardsCapped(t *testing.T, m *manager, perShard, takes int) {
	t.Helper()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n := len(s.entries)
		s.mu.Unlock()
		require.LessOrEqual(t, n, perShard, "after %d takes shard %d holds more than ceil(MaxKeys/256) keys", takes, i)
	}
}

// BenchmarkFlood1M sends 1,000,000 distinct random keys (4 to 200 bytes,
// the first 4 the key's number) through one manager at the default MaxKeys
// (1<<20) on the real clock, each as a request of cost 1 that the manager
// admits and tracks, and reports:
//
//   - heap-B: live heap held by the manager after the flood (HeapAlloc
//     after GC, less the same before the manager was made);
//   - B/key: that divided by the keys tracked, key bytes included (stored
//     keys average about 33 bytes: a key over 64 bytes is a 32-byte digest);
//   - keyB/key: of which the key's bytes as kept;
//   - keys: keys tracked at the end;
//   - take-p50-ns, take-p99-ns, take-p99.9-ns, take-max-ns: the distribution
//     of single takes, each timed with time.Now() around it (so including
//     that clock read, and any GC assist or stop that fell on it);
//   - rebuild-*: the shard rebuilds among them, as BenchmarkHeapPerKey
//     reports them.
//
// b.N only repeats the whole flood, each time on a new manager; run it once:
//
//	go test -run '^$' -bench BenchmarkFlood1M -benchtime=1x -benchmem .
func BenchmarkFlood1M(b *testing.B) {
	const flood = 1_000_000
	pauses := make([]time.Duration, flood) // made before the heap is measured
	b.ResetTimer()
	for range b.N {
		keys := newFloodKeys(0xF1, 4)
		r := rule{limit: 10, burst: 10, window: minute}
		ctx := context.Background()
		var rebuilds latencies
		observeRebuild = rebuilds.add

		before := liveHeap()
		m := newManager(algFixed, 1, ConfigDefault.MaxKeys, nil)
		for i := range flood {
			key := keys.key(i)
			start := time.Now()
			d, _ := takeRule(m, ctx, key, r, 1)
			pauses[i] = time.Since(start)
			if !d.Allowed {
				b.Fatalf("key %d: a new key was rejected", i)
			}
		}
		tracked := m.len()
		after := liveHeap()
		runtime.KeepAlive(m)
		observeRebuild = nil
		stored := 0 // bytes of the keys as kept: a key over 64 bytes is its digest
		for i := range m.shards {
			for _, e := range m.shards[i].entries {
				stored += int(e.klen &^ digestFlag)
			}
		}

		held := float64(int64(after) - int64(before))
		b.ReportMetric(held, "heap-B")
		b.ReportMetric(held/float64(tracked), "B/key")
		b.ReportMetric(float64(stored)/float64(tracked), "keyB/key")
		b.ReportMetric(float64(tracked), "keys")
		slices.Sort(pauses)
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1}} {
			b.ReportMetric(float64(pauses[min(flood-1, int(q.q*flood))]), "take-"+q.name+"-ns")
		}
		rebuilds.report(b, "rebuild")
	}
}
