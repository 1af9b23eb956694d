package quota

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// msec is a millisecond, as the tests of held takes count time.
const msec = time.Millisecond

// timedTake is a take of cost at ms since the start of a test.
type timedTake struct{ at, cost int64 }

// While a key is held off, by a block (BlockFor) or by the gap since its
// last admitted take (MinInterval), the RetryAfter of its takes is when
// the same take would be admitted: at the end of the hold, or later when
// its limits have no room for it then (each limit's own wait, the longest
// for the Result). A client that waits exactly RetryAfter and retries is
// admitted, and one that retries a ms sooner is not; a rejection during a
// block does not draw it out. On every backend (with the injected clock)
// and algorithm.
func TestRetryAfterWhileHeld(t *testing.T) {
	perSecond3 := []Limit{{Max: 3, Expiration: time.Second}}
	cases := []struct {
		name       string
		block, gap time.Duration
		limits     []Limit
		setup      []timedTake // before the held take
		held       timedTake
		upTo       bool // the held take and its retries are TakeUpTo's
		want       map[Algorithm][]time.Duration
		blockRest  time.Duration // the block's rest at held.at, when it runs
	}{
		{
			// The window is full and the block ends before the quota is
			// back: the fixed window's and the log's at 1000 ms, the
			// bucket's token at 334 ms, the sliding window's at 1334 ms,
			// when its previous window of 3 weighs 1.998.
			name: "block", block: 200 * time.Millisecond, limits: perSecond3,
			setup: []timedTake{{0, 3}, {10, 1}}, held: timedTake{110, 1},
			want: map[Algorithm][]time.Duration{
				FixedWindow: {890 * msec}, SlidingWindow: {1224 * msec}, TokenBucket: {224 * msec}, SlidingLog: {890 * msec},
			},
			blockRest: 100 * msec,
		},
		{
			name: "gap", gap: 200 * time.Millisecond, limits: perSecond3,
			setup: []timedTake{{0, 3}}, held: timedTake{100, 1},
			want: map[Algorithm][]time.Duration{
				FixedWindow: {900 * msec}, SlidingWindow: {1234 * msec}, TokenBucket: {234 * msec}, SlidingLog: {900 * msec},
			},
		},
		{
			name: "gap, up to", gap: 200 * time.Millisecond, limits: perSecond3, upTo: true,
			setup: []timedTake{{0, 3}}, held: timedTake{100, 5},
			want: map[Algorithm][]time.Duration{
				FixedWindow: {900 * msec}, SlidingWindow: {1234 * msec}, TokenBucket: {234 * msec}, SlidingLog: {900 * msec},
			},
		},
		{
			// A take rejected for the gap at 50 ms blocks until 150 ms;
			// the gap runs until 500 ms, and a take at 150 would be
			// rejected for it, and blocked anew.
			name: "gap beyond the block", block: 100 * time.Millisecond, gap: 500 * time.Millisecond,
			limits: []Limit{{Max: 100, Expiration: time.Second}},
			setup:  []timedTake{{0, 1}, {50, 1}}, held: timedTake{100, 1},
			want: map[Algorithm][]time.Duration{
				FixedWindow: {400 * msec}, SlidingWindow: {400 * msec}, TokenBucket: {400 * msec}, SlidingLog: {400 * msec},
			},
			blockRest: 50 * msec,
		},
		{
			// The second limit rejects at 300 ms and blocks until 500;
			// at 400 the first has room (its part waits for the block
			// alone) and the second waits for its own.
			name: "two limits", block: 200 * time.Millisecond,
			limits: []Limit{{Max: 3, Expiration: 100 * time.Millisecond}, {Max: 5, Expiration: 10 * time.Second}},
			setup:  []timedTake{{0, 3}, {200, 2}, {300, 1}}, held: timedTake{400, 1},
			want: map[Algorithm][]time.Duration{
				FixedWindow:   {100 * msec, 9600 * msec},
				SlidingWindow: {100 * msec, 11600 * msec},
				TokenBucket:   {100 * msec, 1600 * msec},
				SlidingLog:    {100 * msec, 9600 * msec},
			},
			blockRest: 100 * msec,
		},
	}
	for _, b := range everyBackend(t) {
		for _, c := range cases {
			for _, alg := range allAlgorithms {
				t.Run(b.name+"/"+c.name+"/"+alg.name(), func(t *testing.T) {
					now := newSettableNow()
					start := now.Now()
					cfg := Config{
						Algorithm: alg, Limits: c.limits, BlockFor: c.block, MinInterval: c.gap,
						Now: now.Now, Name: "held-" + strconv.Itoa(len(c.name)) + c.name + alg.name(),
						DisableDenyCache: true, // each answer is the backend's
					}
					b.set(&cfg)
					l, err := New(cfg)
					require.NoError(t, err)
					take := func(key string, at time.Duration, cost int64) Result {
						t.Helper()
						now.Set(start.Add(at))
						if c.upTo && cost > 0 {
							_, res, err := l.TakeUpTo(context.Background(), key, int(cost))
							require.NoError(t, err)
							return res
						}
						res, err := l.Take(context.Background(), key, int(cost))
						require.NoError(t, err)
						return res
					}
					// Key a, and key b of the same history, which retries a
					// ms sooner.
					for _, s := range c.setup {
						take("a", time.Duration(s.at)*msec, s.cost)
						take("b", time.Duration(s.at)*msec, s.cost)
					}
					at := time.Duration(c.held.at) * msec
					res := take("a", at, c.held.cost)
					require.False(t, res.Allowed())
					take("b", at, c.held.cost)
					want := c.want[alg]
					for i, d := range res.Decisions() {
						assert.Equal(t, want[i], d.RetryAfter, "limit %d's wait", i)
						assert.Zero(t, d.Remaining)
						assert.GreaterOrEqual(t, d.ResetAfter, d.RetryAfter)
					}
					retry := res.RetryAfter()
					if c.blockRest > 0 {
						res = take("a", at, 0)
						assert.Equal(t, c.blockRest, res.RetryAfter(), "the held take did not draw the block out")
					}
					res = take("b", at+retry-msec, c.held.cost)
					assert.False(t, res.Allowed(), "a ms sooner than RetryAfter %v", retry)
					res = take("a", at+retry, c.held.cost)
					assert.True(t, res.Allowed(), "after RetryAfter %v", retry)
				})
			}
		}
	}
}

// A take of a cost above the quota, held off by a block or a gap, is
// answered with RetryAfter Never, as it is when nothing holds the key: no
// wait would admit it. Rejected for the gap, it does not block the key.
func TestNeverWhileHeld(t *testing.T) {
	for _, b := range everyBackend(t) {
		for _, alg := range allAlgorithms {
			t.Run(b.name+"/"+alg.name(), func(t *testing.T) {
				now := newSettableNow()
				cfg := Config{
					Algorithm: alg, Limits: []Limit{{Max: 3, Expiration: time.Second}},
					BlockFor: time.Minute, MinInterval: 200 * time.Millisecond,
					Now: now.Now, Name: "held-never-" + alg.name(), DisableDenyCache: true,
				}
				b.set(&cfg)
				l, err := New(cfg)
				require.NoError(t, err)
				take := func(cost int) Result {
					t.Helper()
					res, err := l.Take(context.Background(), "k", cost)
					require.NoError(t, err)
					return res
				}
				res := take(1)
				require.True(t, res.Allowed())
				now.Add(100 * msec)
				res = take(9)
				assert.False(t, res.Allowed())
				assert.Equal(t, Never, res.RetryAfter(), "in the gap")
				now.Add(100 * msec)
				res = take(1)
				assert.True(t, res.Allowed(), "the gap has ended, and nothing blocked the key")
				now.Add(100 * msec)
				res = take(1)
				require.Equal(t, time.Minute, res.RetryAfter(), "rejected for the gap, and so blocked")
				res = take(9)
				assert.Equal(t, Never, res.RetryAfter(), "in the block")
				now.Add(30 * time.Second)
				res = take(0)
				assert.Equal(t, 30*time.Second, res.RetryAfter(), "the block has run half its time")
			})
		}
	}
}

// FuzzRetryAfterHeld plays takes, takes up to a cost and waits on one key
// of any algorithm, under one limit or two, with BlockFor, MinInterval or
// both (each up to a few windows), and checks every rejection's
// RetryAfter, but Never, against the step functions: the same take after
// exactly RetryAfter is admitted (RetryAfter never lies short), and one a
// ms sooner is not (nor long).
func FuzzRetryAfterHeld(f *testing.F) {
	f.Add(uint8(0), uint64(3), uint64(3), uint64(1000), uint16(200), uint16(0), false, []byte{0, 3, 0, 1, 2, 100, 0, 1, 2, 10, 0, 2})
	f.Add(uint8(1), uint64(3), uint64(3), uint64(1000), uint16(0), uint16(200), false, []byte{0, 3, 2, 100, 0, 1, 1, 5, 3, 40, 0, 2})
	f.Add(uint8(2), uint64(4), uint64(9), uint64(60), uint16(100), uint16(500), true, []byte{0, 1, 2, 50, 0, 1, 2, 50, 0, 1, 1, 9})
	f.Add(uint8(3), uint64(3), uint64(3), uint64(100), uint16(200), uint16(30), true, []byte{0, 3, 2, 200, 0, 2, 2, 100, 0, 1, 3, 50, 1, 4})
	f.Fuzz(func(t *testing.T, algByte uint8, limit, burst, window uint64, block, gap uint16, two bool, ops []byte) {
		alg := allAlgorithms[int(algByte)%len(allAlgorithms)]
		ruleOf := func(limit, burst, window uint64) rule {
			r := fuzzRule(alg, limit, burst, window)
			if alg == SlidingLog {
				r.max = min(r.max, 64) // a log keeps an entry per unit
				r.burst = r.max
			}
			return r
		}
		ls := one(ruleOf(limit, burst, window))
		if two {
			ls.n, ls.r[1] = 2, ruleOf(limit/2+1, burst+3, window*5+1)
		}
		ls.block, ls.gap = int64(block), int64(gap)
		if !ls.keyRules() {
			return
		}
		var lg *logs
		if alg == SlidingLog {
			lg = new(logs)
			for i := range ls.n {
				lg.ring[i] = make([]int64, ls.r[i].max)
			}
		}
		var sts [maxStates]state
		now := int64(0)
		take := func(sts *[maxStates]state, at int64, ls *limits, cost int64) Result {
			var v Result
			alg.decideKeyInto(&v, sts, lg, at, ls, cost, 0)
			return v
		}
		for step := 0; step < fuzzMaxOps && len(ops) >= 2; step++ {
			op, arg := ops[0]%4, int64(ops[1])
			ops = ops[2:]
			switch op {
			case 2:
				now = min(now+arg, fuzzMaxNow)
				continue
			case 3:
				now = min(now+arg*max(1, ls.r[0].window/32), fuzzMaxNow)
				continue
			}
			at := ls
			at.upTo = op == 1
			cost := arg % (capacity(alg, ls.r[0]) + 2)
			v := take(&sts, now, &at, cost)
			if v.Allowed() {
				if lg != nil && at.upTo {
					lg.record(&sts, &at, v.granted)
				} else if lg != nil {
					lg.record(&sts, &at, cost)
				}
				continue
			}
			retry := v.RetryAfter()
			if retry == Never {
				continue
			}
			wait := int64(retry / time.Millisecond)
			where := func() string {
				return fmt.Sprintf("%s %+v block %d gap %d: take (up to %v) of %d at %d ms rejected for %v",
					alg.name(), ls.r[:ls.n], ls.block, ls.gap, at.upTo, cost, now, retry)
			}
			later := sts
			if w := take(&later, now+wait, &at, cost); !w.Allowed() {
				t.Fatalf("%s: rejected again after it, for %v", where(), w.RetryAfter())
			}
			sooner := sts
			if w := take(&sooner, now+wait-1, &at, cost); w.Allowed() {
				t.Fatalf("%s: admitted a ms sooner", where())
			}
		}
	})
}
