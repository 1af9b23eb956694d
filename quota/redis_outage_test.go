package quota

import (
	"context"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On Redis, a key that Redis rejected is answered by the deny cache
// without a script call until its RetryAfter; with DisableDenyCache each
// take is a call.
func TestRedisDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, disabled := range []bool{false, true} {
		now := newSettableNow()
		l, err := New(Config{Limits: []Limit{PerMinute(1)}, Redis: srv.Client(t), Now: now.Now,
			DisableDenyCache: disabled, KeyPrefix: "deny-" + map[bool]string{false: "on", true: "off"}[disabled] + ":"})
		require.NoError(t, err)
		requireTake(t, l, "k", true, SourceBackend)
		requireTake(t, l, "k", false, SourceBackend)
		require.NoError(t, admin.ConfigResetStat(ctx).Err())
		want := SourceDenyCache
		if disabled {
			want = SourceBackend
		}
		res := requireTake(t, l, "k", false, want)
		assert.Equal(t, time.Minute, res.RetryAfter())
		scripts := redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
		if disabled {
			assert.Equal(t, 1, scripts, "DisableDenyCache: a call")
		} else {
			assert.Zero(t, scripts, "the deny cache answered")
			now.Add(time.Minute)
			requireTake(t, l, "k", true, SourceBackend)
		}
	}
}

// While Redis is down each FailurePolicy answers, the breaker opens after
// BreakerFailures calls, and once Redis is back a probe after the
// cool-down closes it. (Redis is down from the start: a call that times
// out after Redis has answered may be a slow Redis's, which failedTake
// answers otherwise.)
func TestRedisOutage(t *testing.T) {
	for _, policy := range []FailurePolicy{FailFallback, FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			now := newSettableNow()
			l, err := New(Config{Limits: []Limit{PerMinute(10)}, Redis: srv.Client(t), Now: now.Now, FailurePolicy: policy,
				Name: "outage-" + policy.String(), BreakerFailures: 2, BreakerCooldown: time.Minute, OnStorageError: func(error) {}})
			require.NoError(t, err)
			g := l.decider.(*guardedStore)
			srv.Stop()
			requireTake(t, l, "k", policy != FailClosed, policySource(policy))
			requireTake(t, l, "k", policy != FailClosed, policySource(policy))
			require.True(t, g.breaker.open(), "BreakerFailures calls failed")
			srv.Restart()
			requireTake(t, l, "k", policy != FailClosed, policySource(policy))
			waitFor(t, "a probe to close the breaker", func() bool {
				now.Add(time.Minute)
				_, _ = l.Take(context.Background(), "probe-starter", 1)
				return !g.breaker.open()
			})
			requireTake(t, l, "k", true, SourceBackend)
		})
	}
}

// While Redis is down an idempotent take is answered by the failure
// policy, and the refund of one taken before cannot drop its record: the
// take is not given back.
func TestRedisOutageIdempotent(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	l, err := New(Config{Limits: []Limit{PerMinute(10)}, Redis: srv.Client(t), FailurePolicy: FailClosed,
		BreakerFailures: 1, BreakerCooldown: time.Minute, Now: newSettableNow().Now, OnStorageError: func(error) {}})
	require.NoError(t, err)
	first, err := l.TakeIdempotent(ctx, "k", "a", 1)
	require.NoError(t, err)
	require.Equal(t, SourceBackend, first.Source())
	second, err := l.TakeIdempotent(ctx, "k", "b", 1)
	require.NoError(t, err)
	srv.Stop()
	after, err := l.RefundIdempotent(ctx, "k", "a", 1, &first)
	require.NoError(t, err)
	assert.Equal(t, first, after, "the record could not be dropped")
	res, err := l.TakeIdempotent(ctx, "k", "c", 1)
	require.NoError(t, err)
	assert.Equal(t, SourceFailClosed, res.Source())
	require.True(t, l.decider.(*guardedStore).breaker.open())
	after, err = l.RefundIdempotent(ctx, "k", "b", 1, &second)
	require.NoError(t, err)
	assert.Equal(t, second, after, "the breaker is open")
}
