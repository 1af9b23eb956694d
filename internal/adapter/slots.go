package adapter

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	goredis "github.com/redis/go-redis/v9"
)

// checkSlots checks the settings of a Concurrency limiter: what a rate's
// fields mean has no sense for slots, and is refused, naming the field.
func (s *Settings) checkSlots() error {
	with := s.firstSet("SkipFailedRequests", "SkipSuccessfulRequests", "MaxFunc", "ExpirationFunc", "IdempotencyKey",
		"Cost", "Limits", "Burst", "Lease", "BlockFor", "MinInterval")
	if with != "" {
		return fmt.Errorf("limiter: %s is set with Concurrency, which holds a slot per request while it runs and gives it back when it ends: it has no window, cost or credit; remove %s", with, with)
	}
	switch {
	case s.Max < 0 || s.Max > 1<<31-1:
		return fmt.Errorf("limiter: Max is %d; it must be 0 (the default) to %d", s.Max, 1<<31-1)
	case s.Expiration < 0 || (s.Expiration > 0 && s.Expiration < time.Millisecond):
		return fmt.Errorf("limiter: Expiration is %v; it must be 0 (the default) or at least 1ms", s.Expiration)
	}
	return s.checkWaiting()
}

// buildSlots returns the request path of a Concurrency limiter: Max slots
// a key, each held at most Expiration, in this process or in Redis.
func (s *Settings) buildSlots() (*Path, error) {
	if err := s.checkSlots(); err != nil {
		return nil, err
	}
	cc := quota.ConcurrencyConfig{
		Max:             s.Max,
		Expiration:      s.Expiration,
		Name:            s.Name,
		KeyPrefix:       s.KeyPrefix,
		MaxKeys:         s.MaxKeys,
		MaxWaiting:      s.MaxWaiting,
		FailurePolicy:   s.FailurePolicy,
		StorageTimeout:  s.StorageTimeout,
		BreakerFailures: s.BreakerFailures,
		BreakerCooldown: s.BreakerCooldown,
		OnStorageError:  s.OnStorageError,
	}
	if s.Storage != nil {
		if v := reflect.ValueOf(s.Storage); v.Kind() == reflect.Pointer && v.IsNil() {
			return nil, fmt.Errorf("limiter: Storage is a nil %T; make it with its package's New, or leave it unset", s.Storage)
		}
	}
	switch st := s.Storage.(type) {
	case nil:
	case goredis.UniversalClient:
		cc.Redis = st
	case interface {
		Conn() goredis.UniversalClient
	}:
		if cc.Redis = st.Conn(); cc.Redis == nil {
			return nil, fmt.Errorf("limiter: Storage is a %T whose Conn() is nil; make it with its New, on a go-redis client", st)
		}
	default:
		return nil, errors.New("limiter: Concurrency keeps its slots in this process or in Redis: Storage must be a Redis storage (one with Conn() redis.UniversalClient), or unset")
	}
	slots, err := quota.NewConcurrency(cc)
	if err != nil {
		return nil, err
	}
	w, err := headers.New(headers.Config{
		Mode:           s.Headers,
		DisableHeaders: s.DisableHeaders,
		PartitionKey:   s.HeaderPartitionKey,
		PolicyName:     s.PolicyName,
		Quotas:         []int{s.Max},
	})
	if err != nil {
		return nil, err
	}
	return &Path{Concurrency: slots, Headers: w, Memory: s.Storage == nil, DryRun: s.DryRun, MaxDelay: s.MaxDelay}, nil
}
