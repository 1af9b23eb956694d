package limiter

import (
	"time"

	rlheaders "github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
)

// The middleware decides with a quota.Limiter, the engine, which this file
// builds from a Config: it picks where state lives from Config.Storage.
//
//   - none: the engine's in-memory manager, in this process;
//   - a storage on go-redis (one with Conn() redis.UniversalClient, as the
//     *Storage of github.com/gofiber/storage/redis/v3 and this module's
//     redis.Store have): the atomic Lua store on that client, exact across
//     every replica that shares it;
//   - any other fiber.Storage: get, decide, set under a lock of this
//     process, as Fiber's own limiter does.

// redisConn is what a Config.Storage offers when it sits on go-redis v9.
type redisConn interface {
	Conn() goredis.UniversalClient
}

// newEngine returns the engine of a limiter with cfg (defaults applied)
// and algorithm alg. It panics with the engine's message when a field of
// cfg that the engine checks is invalid.
func newEngine(cfg *Config, alg quota.Algorithm) *quota.Limiter {
	qc := quota.Config{
		Algorithm:        alg,
		Limits:           engineLimits(cfg),
		VaryMax:          cfg.MaxFunc != nil,
		Name:             cfg.Name,
		KeyPrefix:        cfg.KeyPrefix,
		MaxKeys:          cfg.MaxKeys,
		FailurePolicy:    cfg.FailurePolicy,
		StorageTimeout:   cfg.StorageTimeout,
		BreakerFailures:  cfg.BreakerFailures,
		BreakerCooldown:  cfg.BreakerCooldown,
		OnStorageError:   cfg.OnStorageError,
		DenyCacheKeys:    cfg.DenyCacheKeys,
		DisableDenyCache: cfg.DisableDenyCache,
	}
	if clock := cfg.clock; clock != nil {
		qc.Now = func() time.Time { return time.UnixMilli(clock()) }
	}
	switch s := cfg.Storage.(type) {
	case nil:
	case *redis.Store:
		qc.RedisStore = s
	case redisConn:
		qc.Redis = s.Conn()
	default:
		qc.Storage = s
	}
	l, err := quota.New(qc)
	if err != nil {
		panic(err.Error())
	}
	return l
}

// engineLimits are the limits of cfg (defaults applied): Limits, or Max
// per Expiration with Burst.
func engineLimits(cfg *Config) []quota.Limit {
	if len(cfg.Limits) == 0 {
		return []quota.Limit{{Max: cfg.Max, Expiration: cfg.Expiration, Burst: cfg.Burst}}
	}
	ls := make([]quota.Limit, len(cfg.Limits))
	for i, l := range cfg.Limits {
		ls[i] = quota.Limit{Max: l.Max, Expiration: l.Expiration, Burst: l.Burst}
	}
	return ls
}

// headerLimits are the windows and policy names of cfg.Limits, for the
// header writer.
func headerLimits(cfg *Config) []rlheaders.Limit {
	var ls []rlheaders.Limit
	for _, l := range cfg.Limits {
		ls = append(ls, rlheaders.Limit{Expiration: l.Expiration, PolicyName: l.PolicyName})
	}
	return ls
}
