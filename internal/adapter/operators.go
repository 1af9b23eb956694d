package adapter

import (
	"context"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/quota"
)

// Operators are the operators' controls of a middleware (NewLimiter in
// each adapter) on its engine, for keys as its KeyGenerator makes them.
// Engine is nil for a middleware that keeps no quota (Concurrency, or a
// LimiterMiddleware of the user's own), and Kind then names it.
type Operators struct {
	Engine *quota.Limiter
	Kind   string
}

// Peek is quota.Limiter.Peek on the middleware's engine.
func (o *Operators) Peek(ctx context.Context, key string) (quota.Status, error) {
	if err := o.check("Peek"); err != nil {
		return quota.Status{}, err
	}
	return o.Engine.Peek(ctx, key)
}

// Reset is quota.Limiter.Reset on the middleware's engine.
func (o *Operators) Reset(ctx context.Context, key string) error {
	if err := o.check("Reset"); err != nil {
		return err
	}
	return o.Engine.Reset(ctx, key)
}

// Block is quota.Limiter.Block on the middleware's engine.
func (o *Operators) Block(ctx context.Context, key string, d time.Duration) (quota.Status, error) {
	if err := o.check("Block"); err != nil {
		return quota.Status{}, err
	}
	return o.Engine.Block(ctx, key, d)
}

func (o *Operators) check(name string) error {
	if o.Engine == nil {
		return fmt.Errorf("limiter: %s: the LimiterMiddleware is %s, which keeps no quota to %s", name, o.Kind, name)
	}
	return nil
}
