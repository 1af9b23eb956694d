package quota

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
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
		alg  Algorithm
	}{
		{"FixedWindow", FixedWindow},
		{"SlidingWindow", SlidingWindow},
		{"TokenBucket", TokenBucket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock testClock
			clock.advance(time.Hour)
			r := rule{max: 3, burst: 3, window: minute}
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
		r := rule{max: 10, burst: 10, window: minute}
		ctx := context.Background()
		var rebuilds latencies
		observeRebuild = rebuilds.add

		before := liveHeap()
		m := newManager(FixedWindow, 1, DefaultMaxKeys, nil)
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

// BenchmarkHeapPerKey tracks 1M keys in the in-memory manager and reports the
// live heap per key beyond the key's own bytes (keys are 13 bytes), and how
// much of that heap is still held once every key has expired and traffic on
// other keys has gone on for a while.
func BenchmarkHeapPerKey(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	keyBytes := 0
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(100_000_000+i)
		keyBytes += len(keys[i])
	}
	b.Run("ours", func(b *testing.B) {
		for range b.N {
			var clock testClock
			m := newManager(FixedWindow, 1, 2*n, clock.millis)
			ls := one(rule{max: 10, burst: 10, window: int64(time.Minute / time.Millisecond)})
			ctx := context.Background()
			var lat, rebuilds latencies // of single takes, and of the rebuilds in them
			observeRebuild = rebuilds.add
			defer func() { observeRebuild = nil }()
			timed := func(k string) {
				start := time.Now()
				_, _ = m.take(ctx, k, &ls, 1)
				lat.add(time.Since(start))
			}
			before := liveHeap()
			for _, k := range keys {
				timed(k)
			}
			after := liveHeap()
			b.ReportMetric(float64(after-before-uint64(keyBytes))/n, "B/key")
			clock.advance(2 * time.Minute)
			for i := range 4 * n { // traffic on a few keys reclaims the rest
				timed(keys[i%1024])
			}
			held := liveHeap()
			lat.report(b, "take")
			rebuilds.report(b, "rebuild")
			b.ReportMetric(100*float64(held-before)/float64(after-before), "%held")
			runtime.KeepAlive(m)
		}
	})
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// latencies is a histogram of durations in whole microseconds.
type latencies struct {
	counts [10_001]int // the last bucket holds 10 ms and more
	n      int
}

func (l *latencies) add(d time.Duration) {
	l.counts[min(int(d/time.Microsecond), len(l.counts)-1)]++
	l.n++
}

// quantile is the smallest bucket (µs) holding the q-th fraction of samples.
func (l *latencies) quantile(q float64) int {
	want, seen := min(l.n-1, int(q*float64(l.n))), 0
	for us, c := range l.counts {
		if seen += c; seen > want {
			return us
		}
	}
	return len(l.counts) - 1
}

func (l *latencies) report(b *testing.B, what string) {
	over := 0
	for _, c := range l.counts[1000:] {
		over += c
	}
	b.ReportMetric(float64(l.n), what+"s")
	b.ReportMetric(float64(l.quantile(0.999)), what+"-p99.9-µs")
	b.ReportMetric(float64(l.quantile(1)), what+"-max-µs")
	b.ReportMetric(float64(over), what+"s>1ms")
}
