package quota

import (
	"context"
	"github.com/stretchr/testify/require"
	"sync/atomic"
	"testing"
	"time"
)

// takeRule and refundRule call a backend under the single rule r, as most
// tests of one limit do.
func takeRule(b backend, ctx context.Context, key string, r rule, cost int64) (Decision, error) {
	ls := one(r)
	v, err := b.take(ctx, key, &ls, cost)
	return v.each[0], err
}

func refundRule(b backend, ctx context.Context, key string, r rule, cost int64, d Decision) error {
	ls := one(r)
	v := Result{n: 1}
	v.each[0] = d
	_, err := b.adjust(ctx, key, &ls, cost, &v)
	return err
}

// traceClock is the clock of a trace played through the manager and Redis
// (with the client clock): its own steps plus the real time the test has
// run, rounded up to ms, so that it never runs slower than Redis's clock,
// by which Redis drops a key once its TTL (set in this clock's ms) has
// passed. A key Redis dropped is then one the manager holds as expired too.
type traceClock struct {
	testClock
	base, steps int64
	began       time.Time
}

func newTraceClock(base int64) *traceClock {
	c := &traceClock{base: base, began: time.Now()}
	c.now.Store(base)
	return c
}

// step moves the trace on by ms.
func (c *traceClock) step(ms int64) {
	c.steps += ms
	c.now.Store(c.base + c.steps + (time.Since(c.began).Nanoseconds()+999_999)/1_000_000)
}

// testClock is a clock the test moves by hand, in ms.
type testClock struct{ now atomic.Int64 }

func (c *testClock) millis() int64           { return c.now.Load() }
func (c *testClock) advance(d time.Duration) { c.now.Add(d.Milliseconds()) }

// redisLimiter is a limiter of cfg, which sets Redis or a Storage on it.
func redisLimiter(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	require.NoError(t, err)
	return l
}

// requireAllowed takes 1 for key from l and requires it admitted.
func requireAllowed(t testing.TB, l *Limiter, key string) Result {
	t.Helper()
	res, err := l.Take(context.Background(), key, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed(), "%s: rejected (%v)", key, res.Source())
	return res
}

// waitFor polls cond until it holds, for up to 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

// allAlgorithms is every Algorithm.
var allAlgorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog}

// testManager is newManager for the states of ls, with the logs of ls for
// SlidingLog: a log's ring is as long as its limit's Max there, the most
// a test's keys may take.
func testManager(alg Algorithm, ls limits, maxKeys int, clock func() int64) *manager {
	m := newManager(alg, ls.states(), maxKeys, clock)
	if alg == SlidingLog {
		m.useLogs(&ls)
	}
	return m
}

// slowMachine is the StorageTimeout of tests that compare Redis's
// decisions with memory's, or count them: long enough that a loaded
// machine's stall is not taken for a failing Redis, which the failure
// policy would answer instead.
const slowMachine = 10 * time.Second
