package limiter

import (
	"context"
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
	v := verdict{n: 1}
	v.each[0] = d
	_, err := b.refund(ctx, key, &ls, cost, &v)
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
