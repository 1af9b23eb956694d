package quota

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The breaker's probe makes a real script call, which writes, for every
// algorithm: on a healthy Redis it succeeds (a probe refused before it
// leaves the process would close the breaker with no word from Redis).
func TestProbeReachesRedis(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, err := New(Config{Name: "probe-" + alg.String(), Algorithm: alg, Limits: []Limit{PerMinute(10)}, Redis: srv.Client(t)})
			require.NoError(t, err)
			require.NoError(t, admin.ConfigResetStat(ctx).Err())
			require.NoError(t, l.decider.(*guardedStore).store.probe(ctx))
			calls := redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
			assert.Positive(t, calls, "the probe reached Redis")
		})
	}
}

// An ACL user that may run the limiter's script but not a command the
// script calls (TIME here) gets an error for every call: it opens the
// breaker as NOPERM does, and the requests that follow are answered by
// the failure policy without a call to Redis each.
func TestScriptCommandRefusedByACL(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "notime", "on", ">secret", "~*", "+@all", "-time").Err())
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "notime", Password: "secret"})
	t.Cleanup(func() { _ = client.Close() })
	l, err := New(Config{Name: "acl", Limits: []Limit{PerMinute(100)}, Redis: client, FailurePolicy: FailClosed, DisableRedisCheck: true})
	require.NoError(t, err)
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	const requests = 60
	for i := range requests {
		res, err := l.Take(ctx, "k"+strconv.Itoa(i), 1)
		require.NoError(t, err)
		assert.Equal(t, SourceFailClosed, res.Source())
	}
	calls := redistest.CommandCalls(t, admin, "evalsha") + redistest.CommandCalls(t, admin, "eval")
	assert.LessOrEqual(t, calls, DefaultBreakerFailures+2, "the breaker opened after the failures in a row (and a probe)")
}

// Clients that log in as different ACL users of one server and database
// reach the same keys: two unnamed limiters with the same algorithm and
// window on them clash, as on one client.
func TestIdentityIgnoresACLUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "svc", "on", ">secret", "~*", "+@all").Err())
	asSvc := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "svc", Password: "secret"})
	t.Cleanup(func() { _ = asSvc.Close() })
	first, err := New(Config{Limits: []Limit{PerMinute(5)}, Redis: srv.Client(t)})
	require.NoError(t, err)
	_, err = New(Config{Limits: []Limit{PerMinute(5)}, Redis: asSvc})
	assert.ErrorContains(t, err, "another limiter of this process keeps its state in the same Storage")
	runtime.KeepAlive(first)
}
