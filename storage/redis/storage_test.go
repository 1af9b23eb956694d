package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storage is the method set of fiber.Storage, declared here so that the
// check below does not depend on Fiber; the one after it checks against
// Fiber's own interface.
type storage interface {
	Get(key string) ([]byte, error)
	Set(key string, val []byte, exp time.Duration) error
	Delete(key string) error
	Reset() error
	Close() error
}

var (
	_ storage       = (*Store)(nil)
	_ fiber.Storage = (*Store)(nil)
)

func TestFiberStorage(t *testing.T) {
	server := redistest.Start(t)
	store := New(server.Client(t))
	rdb := server.Client(t)
	ctx := context.Background()

	require.NoError(t, store.Set("a", []byte("va"), time.Minute))
	got, err := store.Get("a")
	require.NoError(t, err)
	assert.Equal(t, []byte("va"), got)
	pttl, err := rdb.PTTL(ctx, "a").Result()
	require.NoError(t, err)
	assert.Positive(t, pttl)
	assert.LessOrEqual(t, pttl, time.Minute)

	require.NoError(t, store.Set("b", []byte("vb"), 0))
	pttl, err = rdb.PTTL(ctx, "b").Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), pttl, "no expiry")

	got, err = store.Get("missing")
	assert.NoError(t, err)
	assert.Nil(t, got)

	require.NoError(t, store.Delete("a"))
	got, err = store.Get("a")
	assert.NoError(t, err)
	assert.Nil(t, got)
	require.NoError(t, store.Delete("a"), "deleting a missing key is fine")

	// Reset would be FLUSHDB, on a database the limiter's keys may share
	// with other data: it refuses, and says how to flush.
	err = store.Reset()
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "limiter: "), "%v", err)
	assert.Contains(t, err.Error(), "Conn().FlushDB")
	n, err := rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "b is still there")
	require.NoError(t, store.Conn().FlushDB(ctx).Err())
	n, err = rdb.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)

	require.NoError(t, store.Close())
	_, err = store.Get("b")
	assert.Error(t, err, "closed")
	assert.Same(t, store.Conn(), store.client)
}

// The context methods of Fiber v3's Storage run under the caller's
// context: a canceled one stops the call.
func TestFiberStorageWithContext(t *testing.T) {
	store := New(redistest.Start(t).Client(t))
	ctx := context.Background()
	require.NoError(t, store.SetWithContext(ctx, "a", []byte("va"), time.Minute))
	got, err := store.GetWithContext(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("va"), got)
	require.NoError(t, store.DeleteWithContext(ctx, "a"))
	got, err = store.GetWithContext(ctx, "a")
	require.NoError(t, err)
	assert.Nil(t, got)
	assert.ErrorIs(t, store.ResetWithContext(ctx), errReset)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = store.GetWithContext(canceled, "a")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, store.SetWithContext(canceled, "a", nil, 0), context.Canceled)
	assert.ErrorIs(t, store.DeleteWithContext(canceled, "a"), context.Canceled)
}
