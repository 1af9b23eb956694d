package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/quota"
	"github.com/gofiber/fiber/v3"
)

// Limiter is the middleware of a Config (Handler) with operators'
// controls beside it: Peek, Reset and Block act on a key as the
// KeyGenerator makes it (the client's address by default, IPv6 by its
// prefix), under the limiter's own identity, for an admin endpoint.
// Make one with NewLimiter.
type Limiter struct {
	handler fiber.Handler
	ops     adapter.Operators
}

// NewLimiter returns the Limiter of config (ConfigDefault when none is
// given): its Handler is the middleware New would return. It panics if
// the config is invalid, naming the field. With a LimiterMiddleware that
// keeps no quota (Concurrency, or one of your own), Peek, Reset and Block
// return an error, and so do they with ExpirationFunc (a key's state
// lives under each window it was taken with).
func NewLimiter(config ...Config) *Limiter {
	cfg := configDefault(config...)
	l := &Limiter{ops: adapter.Operators{Kind: fmt.Sprintf("%T", cfg.LimiterMiddleware)}}
	if a, ok := cfg.LimiterMiddleware.(algorithmic); ok {
		var path *adapter.Path
		l.handler, path = build(&cfg, adapter.Settings{Algorithm: a.algorithm()})
		l.ops.Engine = path.Engine
		return l
	}
	l.handler = New(cfg)
	return l
}

// Handler returns the middleware.
func (l *Limiter) Handler() fiber.Handler { return l.handler }

// Peek returns key's state under every limit, as a request of cost 1
// would find it now, and counts nothing: each limit's Remaining, when its
// quota is back (ResetAfter), its RetryAfter, and how long the key is
// held off whatever its counts (Held). With MaxFunc, the limit read is
// Max's. See quota.Limiter.Peek.
func (l *Limiter) Peek(ctx context.Context, key string) (quota.Status, error) {
	return l.ops.Peek(ctx, key)
}

// Reset forgets key's counts, its block and its gap; on Redis, every
// replica sees it within a second. See quota.Limiter.Reset.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.ops.Reset(ctx, key)
}

// Block rejects key for d (above 0, at most 365 days) whatever its
// counts, with Retry-After, until d has passed or Reset lifts it; on
// Redis, every replica within a second. See quota.Limiter.Block.
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) (quota.Status, error) {
	return l.ops.Block(ctx, key, d)
}

// algorithmic is a LimiterMiddleware of this package that keeps a quota.
type algorithmic interface {
	algorithm() quota.Algorithm
}

func (FixedWindow) algorithm() quota.Algorithm   { return quota.FixedWindow }
func (SlidingWindow) algorithm() quota.Algorithm { return quota.SlidingWindow }
func (TokenBucket) algorithm() quota.Algorithm   { return quota.TokenBucket }
func (SlidingLog) algorithm() quota.Algorithm    { return quota.SlidingLog }
