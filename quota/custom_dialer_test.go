package quota

import (
	"context"
	"net"
	"runtime"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two clients whose Addr is go-redis's default but whose Dialers reach two
// servers are two stores: two unnamed limiters on them with the same
// algorithm and window are no clash, and each counts on its own server.
// Two clients with go-redis's own dialer and the same Addr are one store.
func TestClientsWithOwnDialersAreStoresOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	var servers [2]*redistest.Server
	var limiters [2]*Limiter
	for i := range servers {
		srv := redistest.Start(t)
		servers[i] = srv
		var dialer net.Dialer
		client := goredis.NewClient(&goredis.Options{Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, srv.Addr())
		}})
		t.Cleanup(func() { _ = client.Close() })
		require.Equal(t, "localhost:6379", client.Options().Addr, "the default Addr, which neither dials")
		l, err := New(Config{Limits: []Limit{PerMinute(3)}, Redis: client})
		require.NoError(t, err, "client %d", i)
		limiters[i] = l
	}
	// Each server counts its own limiter's takes.
	for i, l := range limiters {
		for range 3 {
			res, err := l.Take(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, res.Allowed(), "limiter %d", i)
			assert.Equal(t, SourceBackend, res.Source())
		}
		res, err := l.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed(), "limiter %d: its 3 are spent", i)
		keys, err := servers[i].Client(t).Keys(ctx, "limiter:*").Result()
		require.NoError(t, err)
		assert.NotEmpty(t, keys, "server %d holds its limiter's key", i)
	}

	// The same Addr through go-redis's own dialer: one store.
	a := servers[0].Client(t)
	b := goredis.NewClient(&goredis.Options{Addr: servers[0].Addr()})
	t.Cleanup(func() { _ = b.Close() })
	onB, err := New(Config{Limits: []Limit{PerMinute(3)}, Redis: b})
	require.NoError(t, err)
	_, err = New(Config{Limits: []Limit{PerMinute(3)}, Redis: a})
	assert.ErrorContains(t, err, "another limiter of this process keeps its state in the same Storage")
	runtime.KeepAlive(limiters)
	runtime.KeepAlive(onB)
}
