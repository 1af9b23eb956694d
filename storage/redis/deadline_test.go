package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingHook counts the commands a client's ProcessHook sees.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *countingHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// A Take returns by its context's deadline when Redis holds it (CLIENT
// PAUSE), pipelined or not, on a plain go-redis Client with its defaults
// (no ContextTimeoutEnabled, a 3 s ReadTimeout) as on one with
// ContextTimeoutEnabled. The client given to New is left as it was, keeps
// serving, and Conn returns it; with ContextTimeoutEnabled its hooks see
// the Store's calls.
func TestTakeReturnsByTheDeadline(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		for name, opts := range map[string][]Option{"pipelined": nil, "unpipelined": {WithoutPipelining()}} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", name, ctxTimeout), func(t *testing.T) {
				takeReturnsByTheDeadline(t, ctxTimeout, opts)
			})
		}
	}
}

func takeReturnsByTheDeadline(t *testing.T, ctxTimeout bool, opts []Option) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { _ = client.Close() })
	hook := &countingHook{}
	client.AddHook(hook)
	store := New(client, opts...).engine
	require.Same(t, client, store.Conn())
	ctx := context.Background()
	rule := Rule{Algorithm: FixedWindow, Max: 10, Expiration: time.Minute}
	before := hook.n.Load()
	_, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	if ctxTimeout {
		assert.Greater(t, hook.n.Load(), before, "the client's hook saw the Store's call")
	}
	assert.Equal(t, ctxTimeout, client.Options().ContextTimeoutEnabled, "the client given to New is unchanged")

	admin := srv.Client(t)
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", 1500, "ALL").Err())
	deadline, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = store.Take(deadline, "k", rule, 1)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, time.Second, "waited for the ReadTimeout, not the deadline")
	t.Logf("returned after %v", took)

	// The pause ends; the client and the Store serve again.
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	res, err := store.Take(ctx, "k", rule, 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

// A call that its deadline ends while go-redis retries a broken connection
// names what broke, and still wraps the context's error.
func TestTimedOutCallNamesTheCause(t *testing.T) {
	var a attempts
	mark := a.mark()
	assert.NoError(t, a.since(mark))
	a.ReportResult(nil)
	a.ReportResult(goredis.Nil)              // a reply (as a script's error is): not retried
	a.ReportResult(context.DeadlineExceeded) // the deadline itself
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	a.ReportResult(reset)
	assert.ErrorIs(t, a.since(mark), reset)
	assert.NoError(t, a.since(a.mark()), "nothing failed since")
}
