package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// While the store fails, each FailurePolicy answers, with its Source:
// FailFallback decides in memory under the same limits, FailOpen admits
// uncounted with each limit's Limit and Remaining 0, FailClosed rejects
// with a RetryAfter of the breaker's cool-down in whole seconds. Every
// failed call is reported, and the event of such an answer is a fallback.
func TestFailurePolicyAnswers(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []FailurePolicy{FailFallback, FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			store := newFaultyStorage(t)
			store.mode.Store(storeDown)
			var reports storageErrors
			l, err := New(Config{Limits: []Limit{PerMinute(2), PerHour(10)}, Storage: store, FailurePolicy: policy,
				BreakerCooldown: 1500 * time.Millisecond, Now: newSettableNow().Now, OnStorageError: reports.hook})
			require.NoError(t, err)
			res, err := l.Take(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, int64(1), store.gets.Load(), "the take called the store")
			assert.True(t, l.Event("k", 1, &res).Fallback())
			switch policy {
			case FailFallback:
				assert.Equal(t, SourceFallback, res.Source())
				assert.True(t, res.Allowed())
				assert.Equal(t, []int{1, 9}, remainings(&res), "counted in memory, under each limit")
				requireTake(t, l, "k", true, SourceFallback)
				res = requireTake(t, l, "k", false, SourceFallback)
				assert.Equal(t, time.Minute, res.RetryAfter(), "the fallback's window")
			case FailOpen:
				assert.Equal(t, SourceFailOpen, res.Source())
				assert.True(t, res.Allowed())
				assert.Equal(t, []int{0, 0}, remainings(&res))
				assert.Equal(t, 2, res.Decisions()[0].Limit)
				assert.Equal(t, 10, res.Decisions()[1].Limit)
				for range 5 {
					requireTake(t, l, "k", true, SourceFailOpen) // uncounted
				}
			case FailClosed:
				assert.Equal(t, SourceFailClosed, res.Source())
				assert.False(t, res.Allowed())
				assert.Equal(t, 2*time.Second, res.RetryAfter(), "1.5 s rounded up to whole seconds")
				assert.Equal(t, 10, res.Decisions()[1].Limit)
			}
			require.NotEmpty(t, reports.all())
			var report *StorageError
			require.ErrorAs(t, reports.all()[0], &report)
			assert.Equal(t, 1, report.Failures, "the first failure, at once")
			assert.ErrorIs(t, report, errStoreDown)
		})
	}
}

// TakeUpTo while the store fails: FailOpen grants all of the cost,
// FailClosed none, FailFallback what the in-memory limiter has room for.
func TestFailurePolicyTakeUpTo(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		policy  FailurePolicy
		granted int
		source  Source
	}{{FailFallback, 3, SourceFallback}, {FailOpen, 5, SourceFailOpen}, {FailClosed, 0, SourceFailClosed}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			store := newFaultyStorage(t)
			store.mode.Store(storeDown)
			l, err := New(Config{Limits: []Limit{PerMinute(3)}, Storage: store, FailurePolicy: tc.policy, OnStorageError: func(error) {}})
			require.NoError(t, err)
			granted, res, err := l.TakeUpTo(ctx, "k", 5)
			require.NoError(t, err)
			assert.Equal(t, tc.granted, granted)
			assert.Equal(t, tc.source, res.Source())
		})
	}
}

// A refund of a take the fallback admitted credits the fallback; one of
// FailOpen's admission changes nothing, and neither fails.
func TestFailurePolicyRefunds(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []FailurePolicy{FailFallback, FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			store := newFaultyStorage(t)
			store.mode.Store(storeDown)
			l, err := New(Config{Limits: []Limit{PerMinute(2)}, Storage: store, FailurePolicy: policy, OnStorageError: func(error) {}})
			require.NoError(t, err)
			requireTake(t, l, "k", true, policySource(policy))
			taken := requireTake(t, l, "k", true, policySource(policy))
			gets := store.gets.Load()
			after, err := l.Refund(ctx, "k", 1, &taken)
			require.NoError(t, err)
			assert.Equal(t, gets, store.gets.Load(), "no call to the store")
			if policy == FailFallback {
				assert.Equal(t, SourceFallback, after.Source())
				assert.Equal(t, 1, after.Tightest().Remaining, "credited in memory")
				requireTake(t, l, "k", true, SourceFallback)
				requireTake(t, l, "k", false, SourceFallback)
			} else {
				assert.Equal(t, taken, after)
			}
		})
	}
}

// A store that fails adjustments loses them, and says so; a refund of a
// take it admitted returns the take's Result.
func TestAdjustmentsOfAFailingStore(t *testing.T) {
	ctx := context.Background()
	store := newFaultyStorage(t)
	l, err := New(Config{Limits: []Limit{PerMinute(2)}, Storage: store, OnStorageError: func(error) {}})
	require.NoError(t, err)
	taken := requireTake(t, l, "k", true, SourceBackend)
	store.mode.Store(storeDown)
	after, err := l.Refund(ctx, "k", 1, &taken)
	require.ErrorIs(t, err, errRefundLost)
	assert.Equal(t, taken, after)
	_, err = l.Penalize(ctx, "k", 1)
	require.ErrorContains(t, err, "penalize: storage failed")
	_, err = l.Reward(ctx, "k", 1)
	require.ErrorContains(t, err, "reward: storage failed")
}

// OnStorageError names a failed adjustment as what it was: a refund, a
// penalty or a reward.
func TestFailedAdjustmentsNamedInReports(t *testing.T) {
	ctx := context.Background()
	for want, adjust := range map[string]func(l *Limiter, taken *Result) error{
		"limiter: refund: ":   func(l *Limiter, taken *Result) error { _, err := l.Refund(ctx, "k", 1, taken); return err },
		"limiter: penalize: ": func(l *Limiter, _ *Result) error { _, err := l.Penalize(ctx, "k", 1); return err },
		"limiter: reward: ":   func(l *Limiter, _ *Result) error { _, err := l.Reward(ctx, "k", 1); return err },
	} {
		t.Run(want, func(t *testing.T) {
			store := newFaultyStorage(t)
			reports := make(chan error, 4)
			l, err := New(Config{Limits: []Limit{PerMinute(2)}, Storage: store, OnStorageError: func(err error) { reports <- err }})
			require.NoError(t, err)
			taken := requireTake(t, l, "k", true, SourceBackend)
			store.mode.Store(storeDown)
			require.Error(t, adjust(l, &taken))
			select {
			case report := <-reports:
				var se *StorageError
				require.ErrorAs(t, report, &se)
				assert.Contains(t, se.Err.Error(), want)
			case <-time.After(5 * time.Second):
				t.Fatal("no report of the failed adjustment")
			}
		})
	}
}

// The names of the policies and sources, as logs and metrics print them.
func TestFailurePolicyAndSourceNames(t *testing.T) {
	assert.Equal(t, "FailFallback FailOpen FailClosed FailurePolicy(7)",
		FailFallback.String()+" "+FailOpen.String()+" "+FailClosed.String()+" "+FailurePolicy(7).String())
	var names []string
	for s := SourceBackend; s <= SourceLease+1; s++ {
		names = append(names, s.String())
	}
	assert.Equal(t, []string{"backend", "deny_cache", "fallback", "fail_open", "fail_closed", "repeat", "lease", "Source(7)"}, names)
	report := &StorageError{Err: errStoreDown, Failures: 3, BreakerOpen: true}
	assert.Equal(t, "limiter: 3 storage call(s) failed since the last report (breaker open): "+errStoreDown.Error(), report.Error())
	warning := &StorageError{Err: errors.New("limiter: Redis may evict rate-limit keys")}
	assert.Equal(t, "limiter: Redis may evict rate-limit keys", warning.Error())
}

// source is what answers a take under p while the store fails.
func policySource(p FailurePolicy) Source {
	return [...]Source{FailFallback: SourceFallback, FailOpen: SourceFailOpen, FailClosed: SourceFailClosed}[p]
}

// requireTake takes 1 for key and requires the answer and its Source.
func requireTake(t *testing.T, l *Limiter, key string, allowed bool, source Source) Result {
	t.Helper()
	res, err := l.Take(context.Background(), key, 1)
	require.NoError(t, err)
	require.Equal(t, source, res.Source(), "%s: the Source", key)
	require.Equal(t, allowed, res.Allowed(), "%s: admitted", key)
	return res
}

// remainings is each limit's Remaining.
func remainings(res *Result) []int {
	var r []int
	for _, d := range res.Decisions() {
		r = append(r, d.Remaining)
	}
	return r
}
