package limiter

import (
	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/quota"
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
// applied) and algorithm alg. It panics, naming the field, when cfg is
// invalid.
func newPath(cfg *Config, alg quota.Algorithm) *adapter.Path {
	p := adapter.MustBuild(cfg, adapter.Settings{
		Algorithm:      alg,
		MaxFunc:        cfg.MaxFunc != nil,
		IdempotencyKey: cfg.IdempotencyKey != nil,
		Clock:          cfg.clock,
	})
	p.FailError, p.ShowKeys = cfg.FailurePolicy == FailError, cfg.DisableValueRedaction
	return p
}
