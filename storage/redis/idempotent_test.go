package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An idempotent take counts a record's first call only: a repeat
// within the ttl gets the first answer again, marked as a repeat, whether
// that was an admission or a rejection, and counts nothing; after the ttl
// the record is gone and the same record counts again. Every algorithm.
func TestTakeIdempotent(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.name, func(t *testing.T) {
			c := newClock()
			store, rdb, _ := newStore(t, c)
			ctx := context.Background()
			rules := []Rule{{Algorithm: a.alg, Max: 2, Expiration: time.Hour}}
			res := make([]Result, 1)
			take := func(record string) (bool, bool, Result) {
				t.Helper()
				ok, repeat, err := store.TakeIdempotentAll(ctx, "k", record, 200*time.Millisecond, rules, 1, res)
				require.NoError(t, err)
				return ok, repeat, res[0]
			}
			ok, repeat, first := take("r1")
			require.True(t, ok)
			require.False(t, repeat)
			for range 3 {
				ok, repeat, again := take("r1")
				assert.True(t, ok)
				assert.True(t, repeat)
				assert.Equal(t, first, again, "the first answer, as it was")
			}
			ok, _, _ = take("r2")
			require.True(t, ok, "the repeats counted nothing: one unit is left")
			ok, repeat, _ = take("r3")
			require.False(t, ok)
			require.False(t, repeat)
			ok, repeat, _ = take("r3")
			assert.False(t, ok)
			assert.False(t, repeat, "a rejection is not kept: it counted nothing")

			// The record lies in the key's slot, and lives for the ttl.
			keys, err := rdb.Keys(ctx, "r1*").Result()
			require.NoError(t, err)
			require.Len(t, keys, 1)
			assert.Equal(t, hashSlot("k"), hashSlot(keys[0]))
			ttl, err := rdb.PTTL(ctx, keys[0]).Result()
			require.NoError(t, err)
			assert.Positive(t, ttl)
			assert.LessOrEqual(t, ttl, 200*time.Millisecond)
			require.Eventually(t, func() bool { return rdb.Exists(ctx, keys[0]).Val() == 0 }, 5*time.Second, 10*time.Millisecond)
			ok, repeat, _ = take("r1")
			assert.False(t, ok, "after its ttl the record counts again, and the limit is spent")
			assert.False(t, repeat)
		})
	}
}

// Three replicas sending the same request at once count it once.
func TestTakeIdempotentAcrossReplicas(t *testing.T) {
	c := newClock()
	_, _, server := newStore(t, c)
	var stores []*engine
	for range 3 {
		stores = append(stores, New(server.Client(t)).engine)
	}
	ctx := context.Background()
	rules := []Rule{{Algorithm: SlidingLog, Max: 100, Expiration: time.Hour}}
	var firsts, repeats atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			res := make([]Result, 1)
			ok, repeat, err := stores[i%3].TakeIdempotentAll(ctx, "shared", "request-"+strconv.Itoa(i%5), time.Minute, rules, 1, res)
			assert.NoError(t, err)
			assert.True(t, ok)
			if repeat {
				repeats.Add(1)
			} else {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(5), firsts.Load(), "each of the 5 requests counted once")
	assert.Equal(t, int64(25), repeats.Load())
	res := make([]Result, 1)
	_, err := stores[0].TakeAll(ctx, "shared", rules, 0, res)
	require.NoError(t, err)
	assert.Equal(t, int64(95), res[0].Remaining)
}

// A record answers 8 repeats; the next counts as a new request, so one id
// reused for good spends quota as any request does.
func TestTakeIdempotentRepeatsAreBounded(t *testing.T) {
	c := newClock()
	store, _, _ := newStore(t, c)
	ctx := context.Background()
	rules := []Rule{{Algorithm: FixedWindow, Max: 3, Expiration: time.Hour}}
	res := make([]Result, 1)
	var repeats, firsts int
	for range 30 {
		ok, repeat, err := store.TakeIdempotentAll(ctx, "k", "same", time.Hour, rules, 1, res)
		require.NoError(t, err)
		switch {
		case repeat:
			repeats++
		case ok:
			firsts++
		}
	}
	assert.Equal(t, 3, firsts, "the limit holds for a reused id")
	assert.Equal(t, 24, repeats, "8 repeats for each of the 3 admissions")
}

// A record stays under the prefix it is given when it can: in the key's
// slot with a tag at its end, or as it is when its prefix's tag puts it
// there already.
func TestTakeIdempotentRecordKeys(t *testing.T) {
	for _, tt := range []struct{ key, record string }{
		{"limiter:fw:1m:user", "limiter:fw:1m:once:abc"},
		{"{app}:fw:1m:user", "{app}:fw:1m:once:abc"},
		{"p{x:fw:1m:user", "p{x:fw:1m:once:abc"},
	} {
		got := recordKeyOf(tt.key, tt.record)
		assert.Equal(t, hashSlot(tt.key), hashSlot(got), tt.record)
		if !strings.Contains(tt.record, "{") || strings.Contains(tt.record, "}") {
			assert.True(t, strings.HasPrefix(got, tt.record), "%s keeps its prefix: %s", tt.record, got)
		}
	}
}

// On Redis Cluster an idempotent take and its record lie in one hash
// slot, whichever master holds the key: no CROSSSLOT, and each request
// counted once.
func TestTakeIdempotentOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	store := New(cluster.Client(t)).engine
	ctx := context.Background()
	rules := []Rule{{Algorithm: SlidingLog, Max: 10, Expiration: time.Hour}}
	res := make([]Result, 1)
	for k := range 60 { // keys over every master
		key := "spread-" + strconv.Itoa(k)
		for try := range 3 {
			ok, repeat, err := store.TakeIdempotentAll(ctx, key, "once:"+key, time.Minute, rules, 1, res)
			require.NoError(t, err, "key %s", key)
			assert.True(t, ok)
			assert.Equal(t, try > 0, repeat)
		}
		_, err := store.TakeAll(ctx, key, rules, 0, res)
		require.NoError(t, err)
		assert.Equal(t, int64(9), res[0].Remaining, "key %s counted once", key)
	}
}

// ForgetRecord drops a record: the same record's next call is a new request,
// counted; a record that has answered a repeat stays. A record of another layout (an older version's, or another
// program's value) answers nothing: the call is decided as a new request,
// without an error, and its record replaces it.
func TestTakeIdempotentForgetAndForeignRecords(t *testing.T) {
	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	rules := []Rule{{Algorithm: FixedWindow, Max: 5, Expiration: time.Hour}}
	res := make([]Result, 1)
	take := func(record string, cost int64) (repeat bool, remaining int64) {
		t.Helper()
		ok, repeat, err := store.TakeIdempotentAll(ctx, "k", record, time.Minute, rules, cost, res)
		require.NoError(t, err)
		require.True(t, ok)
		return repeat, res[0].Remaining
	}
	repeat, remaining := take("r1", 1)
	require.False(t, repeat)
	require.Equal(t, int64(4), remaining)
	repeated, err := store.ForgetRecord(ctx, "k", "r1")
	require.NoError(t, err)
	require.False(t, repeated)
	repeat, remaining = take("r1", 1)
	assert.False(t, repeat, "forgotten: a new request")
	assert.Equal(t, int64(3), remaining)

	// A record that has answered a repeat stays.
	repeat, _ = take("r1", 1)
	require.True(t, repeat)
	repeated, err = store.ForgetRecord(ctx, "k", "r1")
	require.NoError(t, err)
	assert.True(t, repeated)
	repeat, _ = take("r1", 1)
	assert.True(t, repeat, "kept")

	keys, err := rdb.Keys(ctx, "r1*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	for _, foreign := range []string{
		"\x01" + strings.Repeat("\x00", 25) + "\x00", // an answer and a repeat count, without the cost
		"x", "", strings.Repeat("\xff", 32),
	} {
		require.NoError(t, rdb.Set(ctx, keys[0], foreign, time.Minute).Err())
		before := remaining
		repeat, remaining = take("r1", 1)
		assert.False(t, repeat, "%q answers nothing", foreign)
		assert.Equal(t, before-1, remaining, "%q: counted", foreign)
		repeat, _ = take("r1", 1)
		assert.True(t, repeat, "the new record answers")
		if remaining == 0 {
			break
		}
	}
}

// On a Ring, ForgetRecord reaches the shard that holds the record: the one
// the take went to, by the limited key.
func TestForgetRecordOnRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	store := New(ring).engine
	ctx := context.Background()
	rules := []Rule{{Algorithm: FixedWindow, Max: 5, Expiration: time.Hour}}
	res := make([]Result, 1)
	for i := range 20 {
		key, record := "p:k"+strconv.Itoa(i), "p:once:r"+strconv.Itoa(i)
		_, repeat, err := store.TakeIdempotentAll(ctx, key, record, time.Minute, rules, 1, res)
		require.NoError(t, err)
		require.False(t, repeat)
		repeated, err := store.ForgetRecord(ctx, key, record)
		require.NoError(t, err)
		require.False(t, repeated)
		_, repeat, err = store.TakeIdempotentAll(ctx, key, record, time.Minute, rules, 1, res)
		require.NoError(t, err)
		assert.False(t, repeat, "%s: forgotten", key)
	}
}

// A value at a record's name answers only when it proves to be a record:
// one of the layout's tag, exactly as long as a record for the call's
// rules, with an admission's flags. Anything else (the older layout, a
// value of the right length without the tag, a record for another number
// of rules, a rejection) answers no repeat: the take is counted, and its
// record replaces the value; and ForgetRecord drops it instead of keeping it
// as a record that answered repeats (but for a record of another number of
// rules, which ForgetRecord, not told the take's rules, keeps: its name is
// the limiter's, whose rules are the take's, so only a hand that writes to
// Redis could have put it there, and keeping it keeps the take's cost).
func TestTakeIdempotentReadsOnlyRecords(t *testing.T) {
	c := newClock()
	store, rdb, _ := newStore(t, c)
	ctx := context.Background()
	rules := []Rule{{Algorithm: FixedWindow, Max: 10, Expiration: time.Hour}}
	res := make([]Result, 1)
	const tag = "once3\x00"
	// Each value is made from a record the store wrote, with its repeats
	// byte (the last) made 1, so that a value taken for a record answers a
	// repeat and is kept by ForgetRecord.
	for i, tc := range []struct {
		name    string
		value   func(record string) string
		answers bool
		kept    bool // by ForgetRecord
	}{
		{"the record", func(r string) string { return r }, true, true},
		{"the older layout: no tag", func(r string) string { return r[len(tag):] }, false, false},
		{"right length, no tag", func(r string) string { return "xxxxxx" + r[len(tag):] }, false, false},
		{"right length, tag zeroed", func(r string) string { return strings.Repeat("\x00", len(tag)) + r[len(tag):] }, false, false},
		{"two rules' length", func(r string) string { return r[:len(tag)+1] + r[len(tag)+1:len(r)-6] + r[len(tag)+1:] }, false, true},
		{"one byte short", func(r string) string { return r[:len(tag)] + r[len(tag)+1:] }, false, false},
		{"a rejection's flags", func(r string) string { return tag + "\x00" + r[len(tag)+1:] }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, record := "k"+strconv.Itoa(i), "r"+strconv.Itoa(i)
			take := func() (repeat bool, remaining int64) {
				t.Helper()
				ok, repeat, err := store.TakeIdempotentAll(ctx, key, record, time.Minute, rules, 1, res)
				require.NoError(t, err)
				require.True(t, ok)
				return repeat, res[0].Remaining
			}
			repeat, remaining := take()
			require.False(t, repeat)
			require.Equal(t, int64(9), remaining)
			names, err := rdb.Keys(ctx, record+"*").Result()
			require.NoError(t, err)
			require.Len(t, names, 1)
			written, err := rdb.Get(ctx, names[0]).Result()
			require.NoError(t, err)
			require.Len(t, written, len(tag)+1+25+6, "tag, answer, cost and repeats")
			require.Equal(t, tag, written[:len(tag)])
			planted := tc.value(written[:len(written)-1] + "\x01")

			require.NoError(t, rdb.Set(ctx, names[0], planted, time.Minute).Err())
			repeat, remaining = take()
			assert.Equal(t, tc.answers, repeat, "a repeat answered")
			if !tc.answers {
				assert.Equal(t, int64(8), remaining, "counted")
				again, _ := take()
				assert.True(t, again, "the take's own record replaced the value")
			}

			require.NoError(t, rdb.Set(ctx, names[0], planted, time.Minute).Err())
			repeated, err := store.ForgetRecord(ctx, key, record)
			require.NoError(t, err)
			assert.Equal(t, tc.kept, repeated, "kept as a record that answered repeats")
			left, err := rdb.Exists(ctx, names[0]).Result()
			require.NoError(t, err)
			assert.Equal(t, tc.kept, left == 1, "the value stays only if it is a record")
		})
	}
}
