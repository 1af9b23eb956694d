package adapter

import (
	"reflect"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/stretchr/testify/assert"
)

// CopyFrom copies every shared field, by name, and nothing else.
func TestCopyFrom(t *testing.T) {
	cfg := struct {
		Max, Burst, IPv6Prefix, MaxKeys, BreakerFailures, DenyCacheKeys, IdempotencyKeys, MaxWaiting        int
		Expiration, StorageTimeout, BreakerCooldown, BlockFor, MinInterval, Lease, IdempotencyTTL, MaxDelay time.Duration
		Name, KeyPrefix, PolicyName                                                                         string
		FailurePolicy                                                                                       quota.FailurePolicy
		OnStorageError                                                                                      func(error)
		DisableDenyCache, DisableHeaders, HeaderPartitionKey                                                bool
		DryRun, SkipFailedRequests, SkipSuccessfulRequests                                                  bool
		Headers                                                                                             headers.Mode
		Other                                                                                               int
	}{1, 2, 3, 4, 5, 6, 8, 9, time.Second, time.Minute, time.Hour, 2 * time.Hour, time.Millisecond, 4 * time.Hour, 3 * time.Hour, 5 * time.Second, "n", "p:", "pol", quota.FailClosed, func(error) {}, true, true, true, true, true, true, headers.Both, 7}
	var s Settings
	s.CopyFrom(&cfg)
	from := reflect.ValueOf(cfg)
	to := reflect.ValueOf(s)
	for _, name := range shared {
		if name == "OnStorageError" {
			assert.NotNil(t, s.OnStorageError)
			continue
		}
		assert.Equal(t, from.FieldByName(name).Interface(), to.FieldByName(name).Interface(), name)
	}
	assert.Zero(t, s.Algorithm)
	assert.Panics(t, func() { s.CopyFrom(&struct{ Max int }{}) })
}
