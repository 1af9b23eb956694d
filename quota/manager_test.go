package quota

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var minute = int64(time.Minute / time.Millisecond)

// checkIndex asserts the shard invariants: every entry is found by its own
// key through the index, and the index holds nothing else.
func checkIndex(t *testing.T, m *manager) {
	t.Helper()
	for si := range m.shards {
		s := &m.shards[si]
		used := 0
		for _, v := range s.index {
			if v != 0 {
				used++
			}
		}
		require.Equal(t, len(s.entries), used, "shard %d: index and entries disagree", si)
		for i, e := range s.entries {
			key := string(s.arena[e.off : e.off+e.klen&^digestFlag])
			require.Equal(t, i, s.find(key, e.klen, e.hash), "shard %d entry %d not found by its key", si, i)
		}
	}
}

// The manager must decide exactly as a plain map of states would, through
// growth, sweeps and compaction, for every algorithm.
func TestManagerMatchesReferenceModel(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		t.Run(alg.name(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var clock testClock
			m := newManager(alg, 1, 1<<20, clock.millis)
			ref := map[string]state{}
			r := rule{max: 5, burst: 5, window: 10_000 * ms}
			for i := range 200_000 {
				clock.advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				key := "k" + strconv.Itoa(rng.IntN(3000))
				cost := int64(rng.IntN(3))
				now := clock.millis()
				st := ref[key]
				if alg.expiry(st, r) <= now {
					st = state{}
				}
				st2, want := alg.take(st, now, r, cost)
				if want.Allowed {
					ref[key] = st2
				}
				got, err := takeRule(m, context.Background(), key, r, cost)
				require.NoError(t, err)
				require.Equal(t, want, got, "step %d key %s", i, key)
			}
			checkIndex(t, m)
		})
	}
}

func TestManagerReclaimsExpiredKeys(t *testing.T) {
	var clock testClock
	m := newManager(FixedWindow, 1, 1<<20, clock.millis)
	r := rule{max: 10, burst: 10, window: minute}
	for i := range 20_000 {
		_, _ = takeRule(m, context.Background(), "key-"+strconv.Itoa(i), r, 1)
	}
	require.Equal(t, 20_000, m.len())
	clock.advance(2 * time.Minute)
	// Traffic on one key sweeps every shard in rotation.
	for range 20_000 {
		_, _ = takeRule(m, context.Background(), "hot", r, 0)
	}
	require.LessOrEqual(t, m.len(), 200, "expired keys must be reclaimed by traffic on any key")
	var arena, entries int
	for i := range m.shards {
		arena += cap(m.shards[i].arena)
		entries += cap(m.shards[i].entries)
	}
	require.Less(t, entries, 2_000, "entry arrays must shrink")
	require.Less(t, arena, 20_000, "key bytes must be released")
	checkIndex(t, m)
}

func TestManagerCapBoundsKeys(t *testing.T) {
	var clock testClock
	const maxKeys = 4 * shardCount
	m := newManager(TokenBucket, 1, maxKeys, clock.millis)
	r := rule{max: 1, burst: 1, window: minute}
	for i := range 50_000 {
		d, err := takeRule(m, context.Background(), "flood-"+strconv.Itoa(i), r, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "a new key starts with a full quota")
	}
	require.LessOrEqual(t, m.len(), maxKeys)
	checkIndex(t, m)
	// A key that is still tracked keeps its state: it is spent.
	s := &m.shards[0]
	e := s.entries[0]
	key := string(s.arena[e.off : e.off+e.klen])
	d, _ := takeRule(m, context.Background(), key, r, 1)
	require.False(t, d.Allowed, "tracked key %q lost its state", key)
}

func TestManagerHostileKeys(t *testing.T) {
	long := strings.Repeat("x", 64<<10)
	keys := []string{
		"", "\x00", "\x00\x00", "\xff\xfe\xfd", "{user}", "}{", "with space",
		"invalid \xc3\x28 utf8", strings.Repeat("a", 64), strings.Repeat("a", 65),
		long, long[:len(long)-1] + "y", string(make([]byte, 32)),
	}
	var clock testClock
	m := newManager(FixedWindow, 1, 1<<20, clock.millis)
	r := rule{max: 2, burst: 2, window: minute}
	for round := range 3 {
		for _, k := range keys {
			d, err := takeRule(m, context.Background(), k, r, 1)
			require.NoError(t, err)
			require.Equal(t, round < 2, d.Allowed, "key %.20q round %d", k, round)
			require.Equal(t, max(0, 1-round), d.Remaining, "key %.20q round %d", k, round)
		}
	}
	require.Equal(t, len(keys), m.len())
	checkIndex(t, m)
}

func TestManagerRefundAfterExpiryIsIgnored(t *testing.T) {
	var clock testClock
	m := newManager(FixedWindow, 1, 1<<20, clock.millis)
	r := rule{max: 1, burst: 1, window: minute}
	d, _ := takeRule(m, context.Background(), "k", r, 1)
	clock.advance(2 * time.Minute)
	d2, _ := takeRule(m, context.Background(), "k", r, 1)
	require.True(t, d2.Allowed)
	require.NoError(t, refundRule(m, context.Background(), "k", r, 1, d))
	d3, _ := takeRule(m, context.Background(), "k", r, 1)
	require.False(t, d3.Allowed, "a refund for an old window must not credit the new one")
}

// At the cap, new keys take a victim's slot; the shard is compacted only now
// and then, not once per new key (which would scan the shard every time).
func TestManagerCapDoesNotCompactPerKey(t *testing.T) {
	var clock testClock
	m := newManager(FixedWindow, 1, 64*shardCount, clock.millis)
	r := rule{max: 10, burst: 10, window: minute}
	for i := range 20_000 { // fills every shard to its cap of 64
		_, _ = takeRule(m, context.Background(), "fill-"+strconv.Itoa(i), r, 1)
	}
	rebuilds := 0
	observeRebuild = func(time.Duration) { rebuilds++ }
	defer func() { observeRebuild = nil }()
	for i := range 10_000 {
		_, _ = takeRule(m, context.Background(), "new-"+strconv.Itoa(i), r, 1)
	}
	require.LessOrEqual(t, rebuilds, 10_000/16+shardCount, "compactions at the cap")
	require.LessOrEqual(t, m.len(), 64*shardCount)
	checkIndex(t, m)
}

// Requests that count nothing (cost 0, or rejected on a new key) leave no
// entry behind.
func TestManagerTracksOnlyKeysWithState(t *testing.T) {
	var clock testClock
	m := newManager(FixedWindow, 1, 1<<20, clock.millis)
	r := rule{max: 1, burst: 1, window: minute}
	for i := range 1000 {
		_, _ = takeRule(m, context.Background(), "free-"+strconv.Itoa(i), r, 0)
		_, _ = takeRule(m, context.Background(), "huge-"+strconv.Itoa(i), r, 5)
	}
	require.Zero(t, m.len())
}
