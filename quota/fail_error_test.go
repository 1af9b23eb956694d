package quota

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failErrorTakes are the takes that return FailError's error, each making
// one decision for key.
var failErrorTakes = []struct {
	name string
	take func(l *Limiter, key string) error
}{
	{"Take", func(l *Limiter, key string) error { _, err := l.Take(context.Background(), key, 1); return err }},
	{"TakeInto", func(l *Limiter, key string) error {
		var res Result
		return l.TakeInto(context.Background(), key, 1, &res)
	}},
	{"TakeUpTo", func(l *Limiter, key string) error { _, _, err := l.TakeUpTo(context.Background(), key, 3); return err }},
	{"TakeIdempotent", func(l *Limiter, key string) error {
		_, err := l.TakeIdempotent(context.Background(), key, "request-"+key, 1)
		return err
	}},
	{"TakeWith", func(l *Limiter, key string) error {
		_, err := l.TakeWith(context.Background(), key, 1, Limit{})
		return err
	}},
}

// Under FailError a take whose Storage call fails returns the storage's
// error, wrapped, and every take calls the storage: the breaker never
// answers in its place, however many fail in a row.
func TestFailErrorReturnsStorageError(t *testing.T) {
	for _, tc := range failErrorTakes {
		t.Run(tc.name, func(t *testing.T) {
			st := newFaultyStorage(t)
			st.mode.Store(storeDown)
			l, err := New(Config{Limits: []Limit{PerMinute(10)}, Storage: st, FailurePolicy: FailError, OnStorageError: func(error) {}})
			require.NoError(t, err)
			const decisions = 20
			for i := range decisions {
				err := tc.take(l, "k")
				require.Error(t, err, "decision %d", i)
				assert.ErrorIs(t, err, errStoreDown)
				assert.ErrorContains(t, err, "limiter: ")
			}
			assert.Equal(t, int64(decisions), st.gets.Load(), "each decision called the storage")
		})
	}
}

// FailFallback, the default, is as it was: no error, the fallback answers,
// and the breaker keeps the calls off the storage once it opens.
func TestFailFallbackUnchangedByFailError(t *testing.T) {
	st := newFaultyStorage(t)
	st.mode.Store(storeDown)
	l, err := New(Config{Limits: []Limit{PerMinute(10)}, Storage: st, OnStorageError: func(error) {}})
	require.NoError(t, err)
	for range 20 {
		res, err := l.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.Equal(t, SourceFallback, res.Source())
	}
	assert.LessOrEqual(t, st.gets.Load(), int64(DefaultBreakerFailures+1), "the breaker opened")
}

// On Redis, FailError returns the error of a Redis that is down (the
// refused dial) and of one that refuses the client (WRONGPASS): each take
// makes its call, and errors.As reaches go-redis's error.
func TestFailErrorOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name     string
		password string
		stop     bool
		check    func(t *testing.T, err error)
	}{
		{"stopped", "secret", true, func(t *testing.T, err error) {
			var op *net.OpError
			assert.True(t, errors.As(err, &op), "a network error: %v", err)
		}},
		{"wrong password", "wrong", false, func(t *testing.T, err error) {
			var reply goredis.Error
			require.True(t, errors.As(err, &reply), "Redis's reply: %v", err)
			assert.Contains(t, reply.Error(), "WRONGPASS")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, "--requirepass", "secret")
			// One dial a call, counted: go-redis's retries of a refused
			// dial would outlast StorageTimeout, whose error would then be
			// the take's; and a connection that AUTH failed is closed.
			var dials atomic.Int64
			var dialer net.Dialer
			client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: tc.password, DialerRetries: 1, MaxRetries: -1,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return dialer.DialContext(ctx, network, addr)
				}})
			t.Cleanup(func() { _ = client.Close() })
			if tc.stop {
				srv.Stop()
			}
			l, err := New(Config{Name: "fe-" + tc.name[:4], Limits: []Limit{PerMinute(10)}, Redis: client, FailurePolicy: FailError,
				DisableRedisCheck: true, OnStorageError: func(error) {}})
			require.NoError(t, err)
			const decisions = 20
			for i := range decisions {
				_, err := l.Take(context.Background(), "k", 1)
				require.Error(t, err, "decision %d", i)
				tc.check(t, err)
			}
			assert.GreaterOrEqual(t, dials.Load(), int64(decisions), "each decision called Redis")
			assert.LessOrEqual(t, dials.Load(), int64(2*decisions), "one call (and dial) each")
		})
	}
}
