package quota

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logKey is one key of the sliding log as a backend keeps it: its state
// and its ring, with the take's entries recorded after the decision.
type logKey struct {
	sts [maxStates]state
	lg  logs
	ls  limits
}

func newLogKey(r rule) *logKey {
	k := &logKey{ls: one(r)}
	k.lg.ring[0] = make([]int64, r.max)
	return k
}

func (k *logKey) take(now, cost int64) Decision {
	var v Result
	SlidingLog.decideInto(&v, &k.sts, &k.lg, now, &k.ls, cost)
	if v.Allowed() && cost > 0 {
		k.lg.record(&k.sts, &k.ls, cost)
	}
	return v.each[0]
}

func (k *logKey) refund(now, cost int64, d Decision) {
	v := Result{n: 1}
	v.each[0] = d
	SlidingLog.adjustAll(&k.sts, &k.lg, now, &k.ls, cost, &v)
}

// The log's step function, call by call with an injected clock: exact over
// any window, Reset when the oldest entry leaves, Retry-After when the
// take would fit, rejections counting nothing.
func TestSlidingLogSteps(t *testing.T) {
	const sec = time.Second
	r := rule{max: 3, burst: 3, window: 1000}
	k := newLogKey(r)
	steps := []struct {
		at, cost int64
		want     Decision
	}{
		{0, 1, allow(3, 2, sec)},
		{100, 1, allow(3, 1, 900*time.Millisecond)},
		{200, 1, allow(3, 0, 800*time.Millisecond)},
		// Full: the first entry leaves at 1000.
		{300, 1, deny(3, 0, 700*time.Millisecond, 700*time.Millisecond)},
		{999, 1, deny(3, 0, time.Millisecond, time.Millisecond)},
		// A cost of 0 fits even a full log.
		{999, 0, allow(3, 0, time.Millisecond)},
		// At 1000 the entry of 0 has left: the window is (0, 1000].
		{1000, 1, allow(3, 0, 100*time.Millisecond)},
		// A cost of 2 needs the two oldest (100, 200) gone: at 1200.
		{1050, 2, deny(3, 0, 50*time.Millisecond, 150*time.Millisecond)},
		{1200, 2, allow(3, 0, 800*time.Millisecond)},
		// The log now holds 1000, 1200, 1200.
		{1300, 4, deny(3, 0, 700*time.Millisecond, Never)},
		// A key idle for a window has nothing left.
		{5000, 3, allow(3, 0, sec)},
	}
	for i, st := range steps {
		d := k.take(st.at, st.cost)
		d.countedIn = 0
		require.Equal(t, st.want, d, "step %d: cost %d at %d ms", i, st.cost, st.at)
	}
}

// A refund takes out the entries of its own take, whatever was counted
// after it; a penalty fills the log from now; a reward frees the newest.
func TestSlidingLogAdjustments(t *testing.T) {
	r := rule{max: 4, burst: 4, window: 1000}
	k := newLogKey(r)
	first := k.take(0, 2)
	require.True(t, first.Allowed)
	require.True(t, k.take(100, 1).Allowed)
	k.refund(200, 2, first) // the log holds 100
	assert.Equal(t, 3, k.take(200, 0).Remaining)
	assert.Equal(t, 900*time.Millisecond, k.take(200, 0).ResetAfter, "the oldest is now the entry of 100")

	v := Result{n: 1, adjust: penalty}
	SlidingLog.adjustAll(&k.sts, &k.lg, 300, &k.ls, 9, &v) // more than the log holds
	d := k.take(300, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter, "the penalty's entries, all at 300, leave at 1300")

	v = Result{n: 1, adjust: reward}
	SlidingLog.adjustAll(&k.sts, &k.lg, 400, &k.ls, 1, &v)
	assert.True(t, k.take(400, 1).Allowed)
	assert.False(t, k.take(400, 1).Allowed)
}

// FuzzSlidingLog plays takes of random costs at random times against a
// model that keeps every admitted take: the log admits a take exactly when
// the cost admitted in the window ending now, with the take's, is at most
// the limit, so never more than the limit in any window, and its
// Remaining, Reset and Retry-After are the model's.
func FuzzSlidingLog(f *testing.F) {
	f.Add(uint8(3), uint16(1000), []byte{0, 1, 50, 1, 50, 1, 10, 2, 200, 3, 255, 1})
	f.Add(uint8(1), uint16(10), []byte{1, 1, 1, 1, 9, 0, 1, 1})
	f.Add(uint8(50), uint16(60000), []byte{255, 20, 255, 20, 255, 40, 3, 50})
	f.Fuzz(func(t *testing.T, limitByte uint8, windowWord uint16, ops []byte) {
		r := rule{max: 1 + int64(limitByte)%60, window: 1 + int64(windowWord)}
		r.burst = r.max
		k := newLogKey(r)
		type taken struct{ at, cost int64 }
		var log []taken
		now := int64(0)
		for step := 0; step < 150 && len(ops) >= 2; step++ {
			now += int64(ops[0]) * (1 + r.window/64)
			cost := int64(ops[1]) % (r.max + 2)
			ops = ops[2:]
			for len(log) > 0 && log[0].at <= now-r.window {
				log = log[1:] // left every window still to come
			}
			in, oldest := int64(0), int64(-1)
			for _, e := range log {
				if e.at > now-r.window {
					in += e.cost
					if oldest < 0 {
						oldest = e.at
					}
				}
			}
			d := k.take(now, cost)
			want := cost <= r.max && in+cost <= r.max
			require.Equal(t, want, d.Allowed, "step %d: cost %d at %d with %d in the window", step, cost, now, in)
			if d.Allowed && cost > 0 {
				log = append(log, taken{now, cost})
				in += cost
				if oldest < 0 {
					oldest = now
				}
			}
			require.Equal(t, int(max(0, r.max-in)), d.Remaining, "step %d", step)
			if in > 0 {
				require.Equal(t, millis(oldest+r.window-now), d.ResetAfter, "step %d", step)
			}
			switch {
			case cost > r.max:
				require.Equal(t, Never, d.RetryAfter)
			case !d.Allowed:
				// The take fits once enough of the oldest have left, and not a
				// millisecond sooner.
				at := now + d.RetryAfter.Milliseconds()
				sum := func(at int64) (s int64) {
					for _, e := range log {
						if e.at > at-r.window {
							s += e.cost
						}
					}
					return s
				}
				require.LessOrEqual(t, sum(at)+cost, r.max, "step %d: not yet room at the Retry-After", step)
				require.Greater(t, sum(at-1)+cost, r.max, "step %d: room before the Retry-After", step)
			}
		}
	})
}

// FuzzSlidingLogAdjustments plays takes, refunds, penalties and rewards on
// one key under two limits (the second with three times the first's
// window) against a model that keeps, per limit, the time of every unit
// counted and still in its window: a take is admitted when both have room
// and enters cost units in both; a refund takes out up to its cost of the
// units of its take's time; a penalty enters up to the limit's units at
// now, the oldest leaving when they do not fit; a reward takes out the
// newest. After every operation each limit's Remaining is the model's.
func FuzzSlidingLogAdjustments(f *testing.F) {
	f.Add(uint8(3), uint16(100), []byte{0, 2, 10, 1, 3, 1, 20, 4, 0, 1, 5, 9, 2, 40, 3, 1, 1, 2})
	f.Add(uint8(1), uint16(5), []byte{1, 0, 1, 2, 1, 3, 0, 1, 0, 2, 2, 7})
	f.Fuzz(func(t *testing.T, limitByte uint8, windowWord uint16, ops []byte) {
		ls := limits{n: 2}
		ls.r[0] = rule{max: 1 + int64(limitByte)%12, window: 1 + int64(windowWord)%5000}
		ls.r[1] = rule{max: ls.r[0].max + int64(limitByte)/12%8, window: 3 * ls.r[0].window}
		k := &logKey{ls: ls}
		for i := range ls.n {
			ls.r[i].burst = ls.r[i].max
			k.ls.r[i].burst = ls.r[i].max
			k.lg.ring[i] = make([]int64, ls.r[i].max)
		}
		model := [2][]int64{} // each limit's units in its window, oldest first
		type taken struct{ at, cost int64 }
		var held []taken
		now := int64(0)
		trim := func() {
			for i := range model {
				for len(model[i]) > 0 && model[i][0] <= now-ls.r[i].window {
					model[i] = model[i][1:]
				}
			}
		}
		for step := 0; step < 120 && len(ops) >= 3; step++ {
			op, wait, arg := ops[0]%4, int64(ops[1]), int64(ops[2])
			ops = ops[3:]
			now += wait * (1 + ls.r[0].window/32)
			trim()
			cost := arg % (ls.r[1].max + 2)
			var v Result
			switch op {
			case 0: // take
				SlidingLog.decideInto(&v, &k.sts, &k.lg, now, &k.ls, cost)
				fits := true
				for i := range model {
					fits = fits && int64(len(model[i]))+cost <= ls.r[i].max
				}
				require.Equal(t, fits, v.Allowed(), "step %d: take of %d at %d, model %v", step, cost, now, model)
				if v.Allowed() && cost > 0 {
					k.lg.record(&k.sts, &k.ls, cost)
					for i := range model {
						for range cost {
							model[i] = append(model[i], now)
						}
					}
					held = append(held, taken{now, cost})
				}
			case 1: // refund of a held take
				if len(held) == 0 {
					continue
				}
				j := int(arg) % len(held)
				h := held[j]
				held = append(held[:j], held[j+1:]...)
				v = Result{n: 2}
				v.each[0].countedIn, v.each[1].countedIn = h.at, h.at
				SlidingLog.adjustAll(&k.sts, &k.lg, now, &k.ls, h.cost, &v)
				for i := range model {
					end := len(model[i])
					for end > 0 && model[i][end-1] > h.at {
						end--
					}
					n := 0
					for n < int(h.cost) && end-1-n >= 0 && model[i][end-1-n] == h.at {
						n++
					}
					model[i] = append(model[i][:end-n], model[i][end:]...)
				}
			case 2: // penalty
				v = Result{n: 2, adjust: penalty}
				SlidingLog.adjustAll(&k.sts, &k.lg, now, &k.ls, cost, &v)
				for i := range model {
					n := min(cost, ls.r[i].max)
					if over := int64(len(model[i])) + n - ls.r[i].max; over > 0 {
						model[i] = model[i][over:]
					}
					for range n {
						model[i] = append(model[i], now)
					}
				}
			case 3: // reward
				v = Result{n: 2, adjust: reward}
				SlidingLog.adjustAll(&k.sts, &k.lg, now, &k.ls, cost, &v)
				for i := range model {
					model[i] = model[i][:len(model[i])-int(min(cost, int64(len(model[i]))))]
				}
			}
			probe := k.sts
			var after Result
			SlidingLog.decideInto(&after, &probe, &k.lg, now, &k.ls, 0)
			for i := range model {
				want := int(max(0, ls.r[i].max-int64(len(model[i]))))
				require.Equal(t, want, after.each[i].Remaining, "step %d: op %d of %d at %d, limit %d, model %v", step, op, cost, now, i, model[i])
			}
		}
	})
}

// A log's Max is bounded at New, naming the field, and VaryMax is refused:
// a key keeps one entry per unit of Max.
func TestSlidingLogConfig(t *testing.T) {
	_, err := New(Config{Algorithm: SlidingLog, Limits: []Limit{{Max: MaxLogLimit, Expiration: time.Hour}}})
	require.NoError(t, err)
	_, err = New(Config{Algorithm: SlidingLog, Limits: []Limit{{Max: 5, Expiration: time.Minute}, {Max: MaxLogLimit + 1, Expiration: time.Hour}}})
	require.ErrorContains(t, err, "Limits[1].Max is 10001")
	_, err = New(Config{Algorithm: SlidingLog, VaryMax: true, Limits: []Limit{PerMinute(5)}})
	require.ErrorContains(t, err, "VaryMax")
}

// Once a key exists, a take of the log in memory allocates nothing, under
// one limit and under several.
func TestSlidingLogTakesAllocateNothing(t *testing.T) {
	for _, limits := range [][]Limit{{PerMinute(100)}, {PerSecond(10), PerMinute(100), PerHour(1000)}} {
		l, err := New(Config{Algorithm: SlidingLog, Limits: limits})
		require.NoError(t, err)
		ctx := context.Background()
		_, err = l.Take(ctx, "key", 1)
		require.NoError(t, err)
		allocs := testing.AllocsPerRun(1000, func() {
			_, _ = l.Take(ctx, "key", 1)
		})
		assert.Zero(t, allocs, "%d limits", len(limits))
	}
}

// The in-memory manager keeps a log's entries through growth, sweeps and
// compaction: many keys over many windows decide as one logKey each.
func TestSlidingLogManagerMatchesModel(t *testing.T) {
	var clock testClock
	r := rule{max: 4, burst: 4, window: 500}
	ls := one(r)
	m := testManager(SlidingLog, ls, 1<<16, clock.millis)
	keys := map[string]*logKey{}
	ctx := context.Background()
	for i := range 100_000 {
		clock.now.Add(int64(i % 3))
		key := string(rune('a'+i%7)) + string(rune('a'+(i*31)%500))
		k := keys[key]
		if k == nil {
			k = newLogKey(r)
			keys[key] = k
		}
		cost := int64(i % 3)
		want := k.take(clock.millis(), cost)
		got, err := m.take(ctx, key, &ls, cost)
		require.NoError(t, err)
		require.Equal(t, want, got.each[0], "take %d on %s", i, key)
	}
	assert.Less(t, m.len(), len(keys), "the sweep dropped no key")
}

// A Storage value that is not a log of these limits reads as no state:
// truncated, of another layout, with more entries than a log may hold, or
// with entries out of time order or after the newest. A log written under
// a larger Max keeps its newest Max entries.
func TestSlidingLogDecodeRejectsForeignValues(t *testing.T) {
	r := rule{max: 3, burst: 3, window: 1000}
	ls := one(r)
	const now = 5000
	valid := func(times ...int64) []byte {
		var sts [maxStates]state
		lg := newLogs(&limits{n: 1, r: [maxLimits]rule{{max: int64(max(len(times), 1))}}})
		copy(lg.ring[0], times)
		sts[0] = state{a: times[len(times)-1], b: int64(len(times))}
		return encodeLogs(encodeStates(&sts, 1, now+1000), &sts, lg, &ls)
	}
	read := func(raw []byte) (state, []int64) {
		var sts [maxStates]state
		lg := newLogs(&ls)
		decodeLogs(raw, now, &ls, &sts, lg)
		return sts[0], lg.ring[0][:sts[0].b]
	}
	s, entries := read(valid(4100, 4200))
	assert.Equal(t, state{a: 4200, b: 2}, s)
	assert.Equal(t, []int64{4100, 4200}, entries)
	s, entries = read(valid(4100, 4200, 4300, 4400, 4500))
	assert.Equal(t, state{a: 4500, b: 3}, s, "a log of a larger Max keeps its newest")
	assert.Equal(t, []int64{4300, 4400, 4500}, entries)

	good := valid(4100, 4200)
	bad := map[string][]byte{
		"truncated":       good[:len(good)-1],
		"longer":          append(append([]byte(nil), good...), 0),
		"another version": append([]byte{stateVersion}, good[1:]...),
		"out of order":    valid(4200, 4100),
		"empty":           nil,
	}
	after := append([]byte(nil), good...)
	after[len(after)-1]++ // the newest entry lies after the state's newest
	bad["after the newest"] = after
	huge := append([]byte(nil), good...)
	binary.BigEndian.PutUint64(huge[stateHeadSize+8:], MaxLogLimit+1)
	bad["too many entries"] = huge
	for name, raw := range bad {
		s, _ := read(raw)
		assert.Equal(t, state{}, s, name)
	}
}

// At its cap the manager hands a dropped key's slot, logs and all, to a new
// key: the new key starts with nothing, and no kept key ever has fewer
// units left than its own history allows.
func TestSlidingLogManagerAtItsCap(t *testing.T) {
	var clock testClock
	r := rule{max: 5, burst: 5, window: 10_000}
	ls := one(r)
	m := testManager(SlidingLog, ls, 4*shardCount, clock.millis)
	keys := map[string]*logKey{}
	forgot := map[string]bool{}
	rng := rand.New(rand.NewPCG(4, 2))
	ctx := context.Background()
	for i := range 50_000 {
		clock.now.Add(int64(rng.IntN(3)))
		key := "k" + strconv.Itoa(rng.IntN(5000))
		k := keys[key]
		fresh := k == nil
		if fresh {
			k = newLogKey(r)
			keys[key] = k
		}
		cost := int64(rng.IntN(3))
		model := k.take(clock.millis(), cost)
		got, err := m.take(ctx, key, &ls, cost)
		require.NoError(t, err)
		d := got.each[0]
		if fresh {
			require.True(t, d.Allowed, "take %d: a new key %s", i, key)
			require.Equal(t, int(r.max-cost), d.Remaining, "take %d: a new key %s starts empty", i, key)
		}
		if !forgot[key] {
			require.GreaterOrEqual(t, d.Remaining, model.Remaining, "take %d: %s has more counted than it took", i, key)
			if d.Remaining > model.Remaining {
				forgot[key] = true // dropped at the cap: no longer comparable
			}
		}
	}
	assert.Positive(t, len(forgot), "the cap never dropped a key")
	assert.LessOrEqual(t, m.len(), 4*shardCount)
}

// A reward or a refund made with a clock behind the key's newest entry (a
// replica whose clock lags) answers alike in memory, on Redis and in any
// Storage: as a take of 0 at the request's time, raised to the newest
// entry the adjustment leaves.
func TestSlidingLogAdjustmentsWithTheClockBehind(t *testing.T) {
	server := redistest.Start(t)
	ls := limits{n: 2}
	ls.r[0] = rule{max: 3, burst: 3, window: 1000}
	ls.r[1] = rule{max: 5, burst: 5, window: 5000}
	var clock testClock
	base := time.Now().UnixMilli()
	backends := []backend{
		testManager(SlidingLog, ls, 1<<10, clock.millis),
		newRedisBackend(server.Client(t), nil, SlidingLog, "behind:", &Config{clock: clock.millis}),
		newStorageBackend(&mapStorage{m: map[string][]byte{}}, SlidingLog, "behind:", clock.millis),
	}
	ctx := context.Background()
	for _, adj := range []adjustment{reward, refundTaken} {
		key := "k" + strconv.Itoa(int(adj))
		var last [3]Result
		for _, at := range []int64{0, 400} {
			clock.now.Store(base + at)
			for i, b := range backends {
				v, err := b.take(ctx, key, &ls, 1)
				require.NoError(t, err)
				last[i] = v
			}
		}
		clock.now.Store(base + 100) // 300 ms behind the newest entry
		var got [3]Result
		for i, b := range backends {
			v := Result{n: ls.n, adjust: adj}
			if adj == refundTaken {
				v = last[i]
			}
			after, err := b.adjust(ctx, key, &ls, 1, &v)
			require.NoError(t, err)
			got[i] = after
		}
		assert.Equal(t, got[0], got[1], "adjustment %d: memory and Redis", adj)
		assert.Equal(t, got[0], got[2], "adjustment %d: memory and Storage", adj)
		// The newest entry lies ahead of the clock: taking it out would
		// move the key's clock back, before entries the log may have let
		// go (a turn's, see turn.go); it stays.
		assert.Equal(t, 1, got[0].each[0].Remaining, "adjustment %d", adj)
	}
}
