package limiter

import "context"

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
