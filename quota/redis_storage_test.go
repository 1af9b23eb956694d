package quota

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// connStorage is a Storage on go-redis that is not this module's Store, as
// gofiber/storage/redis/v3's is: it counts the calls made through its Get,
// Set and Delete.
type connStorage struct {
	client goredis.UniversalClient
	calls  atomic.Int64
}

func (s *connStorage) Conn() goredis.UniversalClient { return s.client }

func (s *connStorage) Get(string) ([]byte, error) { s.calls.Add(1); return nil, nil }

func (s *connStorage) Set(string, []byte, time.Duration) error { s.calls.Add(1); return nil }

func (s *connStorage) Delete(string) error { s.calls.Add(1); return nil }

// A Storage on go-redis (one with Conn) is decided in Redis by the Lua
// engine, as Config.Redis is, never through its Get and Set; a storage/redis
// Store is decided with its own engine and options.
func TestStorageOnGoRedisIsDecidedInRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	plain := &connStorage{client: srv.Client(t)}
	for name, st := range map[string]Storage{
		"conn":  plain,
		"store": redis.New(srv.Client(t), redis.WithoutPipelining()),
	} {
		t.Run(name, func(t *testing.T) {
			l, err := New(Config{Name: name, Limits: []Limit{PerMinute(2)}, Storage: st, StorageTimeout: slowMachine})
			require.NoError(t, err)
			for i := range 3 {
				res, err := l.Take(ctx, "k", 1)
				require.NoError(t, err)
				assert.Equal(t, i < 2, res.Allowed(), "take %d", i)
				assert.Equal(t, "redis", l.Event("k", 1, &res).Backend)
			}
			keys, err := srv.Client(t).Keys(ctx, "*"+name+"*k").Result()
			require.NoError(t, err)
			assert.Len(t, keys, 1, "the key's state, in Redis")
		})
	}
	assert.Zero(t, plain.calls.Load(), "nothing read or written through Get, Set or Delete")
}

// getSetOnly hides a storage's Conn: quota then reads and writes it
// through Get and Set, as earlier releases did with any Storage given to
// it directly, go-redis or not.
type getSetOnly struct{ Storage }

// redisKV is a Storage on go-redis that really stores, as
// gofiber/storage/redis/v3's does.
type redisKV struct{ client goredis.UniversalClient }

func (s redisKV) Conn() goredis.UniversalClient { return s.client }

func (s redisKV) Get(key string) ([]byte, error) {
	v, err := s.client.Get(context.Background(), key).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	return v, err
}

func (s redisKV) Set(key string, val []byte, exp time.Duration) error {
	return s.client.Set(context.Background(), key, val, exp).Err()
}

func (s redisKV) Delete(key string) error { return s.client.Del(context.Background(), key).Err() }

// A rolling deploy of quota users whose Storage sits on go-redis: the
// replicas of the last release read and write it through Get and Set,
// those of this one decide in Redis with the Lua engine. Each keeps to
// keys of its own, so neither reads the other's value (another layout) as
// nothing: taking turns, the two admit at most the limit each, where
// sharing keys they admitted every request.
func TestStorageOnGoRedisKeptApartFromGetAndSet(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	st := redisKV{client: srv.Client(t)}
	cfg := func(s Storage) Config {
		return Config{Limits: []Limit{PerMinute(3)}, Storage: s, StorageTimeout: slowMachine}
	}
	last, err := New(cfg(getSetOnly{st}))
	require.NoError(t, err)
	this, err := New(cfg(st))
	require.NoError(t, err)
	admitted := map[string]int{}
	for i := range 12 {
		l, name := last, "last release"
		if i%2 == 1 {
			l, name = this, "this release"
		}
		res, err := l.Take(ctx, "k", 1)
		require.NoError(t, err)
		if res.Allowed() {
			admitted[name]++
		}
	}
	assert.Equal(t, map[string]int{"last release": 3, "this release": 3}, admitted)
	keys, err := srv.Client(t).Keys(ctx, "*").Result()
	require.NoError(t, err)
	// The breaker's probe key (a write that lasts a ms) may still be there.
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasSuffix(k, "{probe}") })
	assert.Len(t, keys, 2, "one key per release: %v", keys)
}

// RedisStore decides on the keys of Redis (and of a middleware on the
// same Redis): replicas through either admit the limit between them.
func TestRedisStoreSharesKeysWithRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	byClient, err := New(Config{Name: "shared", Limits: []Limit{PerMinute(3)}, Redis: srv.Client(t), StorageTimeout: slowMachine})
	require.NoError(t, err)
	byStore, err := New(Config{Name: "shared", Limits: []Limit{PerMinute(3)}, RedisStore: redis.New(srv.Client(t)), StorageTimeout: slowMachine})
	require.NoError(t, err)
	admitted := 0
	for i := range 12 {
		l := byClient
		if i%2 == 1 {
			l = byStore
		}
		res, err := l.Take(ctx, "k", 1)
		require.NoError(t, err)
		if res.Allowed() {
			admitted++
		}
	}
	assert.Equal(t, 3, admitted)
}

// A Redis store that has no client is an error at New that names the
// field, not a panic.
func TestRedisStoreWithoutClient(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"zero Store as RedisStore": {Config{RedisStore: &redis.Store{}}, "limiter: RedisStore is a storage/redis Store with no client; make it with redis.New"},
		"zero Store as Storage":    {Config{Storage: &redis.Store{}}, "limiter: Storage is a storage/redis Store with no client; make it with redis.New"},
		"nil Store as Storage":     {Config{Storage: (*redis.Store)(nil)}, "limiter: Storage is a nil *redis.Store; make it with its package's New"},
		"nil Conn":                 {Config{Storage: &connStorage{}}, "limiter: Storage is a *quota.connStorage whose Conn() is nil; make it with its New, on a go-redis client"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.Limits = []Limit{PerMinute(3)}
			_, err := New(tc.cfg)
			assert.EqualError(t, err, tc.want)
		})
	}
}
