package limiter

import (
	"github.com/fiberlimit/limiter/internal/adapter"
)

// The middleware decides with a quota.Limiter, the engine, which this file
// builds from a Config. Config.Storage picks where state lives:
//
//   - none: the engine's in-memory manager, in this process;
//   - a storage on go-redis (one with Conn() redis.UniversalClient, as the
//     *Storage of github.com/gofiber/storage/redis/v3 and this module's
//     redis.Store have): the atomic Lua store on that client, exact across
//     every replica that shares it;
//   - any other fiber.Storage: get, decide, set under a lock of this
//     process, as Fiber's own limiter does.

// newPath returns the request path of a limiter with cfg (defaults
// applied) and s, its algorithm or Concurrency. It panics, naming the
// field, when cfg is invalid.
func newPath(cfg *Config, s adapter.Settings) *adapter.Path {
	s.MaxFunc = cfg.MaxFunc != nil
	s.IdempotencyKey = cfg.IdempotencyKey != nil
	s.Cost = cfg.Cost != nil
	s.Clock = cfg.clock
	p := adapter.MustBuild(cfg, s)
	p.FailError, p.ShowKeys = cfg.FailurePolicy == FailError, cfg.DisableValueRedaction
	return p
}
