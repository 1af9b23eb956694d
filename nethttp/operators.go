package nethttp

import (
	"context"
	"net/http"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/quota"
)

// Limiter is the middleware of a Config (Handler) with operators'
// controls beside it: Peek, Reset and Block act on a key as the
// KeyGenerator makes it (the client's address by default, IPv6 by its
// prefix), under the limiter's own identity, for an admin endpoint.
// Make one with NewLimiter.
type Limiter struct {
	handler func(http.Handler) http.Handler
	ops     adapter.Operators
}

// NewLimiter returns the Limiter of cfg: its Handler is the middleware New
// would return. It panics if cfg is invalid, naming the field.
func NewLimiter(cfg Config) *Limiter {
	l := &Limiter{}
	var path *adapter.Path
	l.handler, path = buildPath(cfg, false)
	l.ops.Engine = path.Engine
	return l
}

// Handler returns the middleware.
func (l *Limiter) Handler() func(http.Handler) http.Handler { return l.handler }

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
