package quota

import (
	"bytes"
	"context"
	"errors"
	"log"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Redis that may evict the limiter's keys (maxmemory with any policy but
// noeviction) is reported at the first decision, to OnStorageError, with
// the fix in the message; a Redis that cannot evict them is not. The
// decision itself does not wait for the look.
func TestEvictingRedisIsReported(t *testing.T) {
	cases := []struct {
		maxmemory, policy string
		reported          bool
	}{
		{"100mb", "allkeys-lru", true},
		{"100mb", "volatile-ttl", true},
		{"100mb", "volatile-lru", true},
		{"100mb", "noeviction", false},
		{"0", "allkeys-lru", false}, // no memory limit: nothing is evicted
	}
	for _, tc := range cases {
		t.Run(tc.maxmemory+"/"+tc.policy, func(t *testing.T) {
			evictionLooks.Clear() // a port an earlier test's server had
			srv := redistest.Start(t, "--maxmemory", tc.maxmemory, "--maxmemory-policy", tc.policy)
			admin := srv.Client(t)
			var mu sync.Mutex
			var reports []error
			replica := redisLimiter(t, Config{
				Limits: []Limit{PerMinute(10)}, Storage: redis.New(srv.Client(t)),
				OnStorageError: func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() },
			})
			requireAllowed(t, replica, "first")
			// The look is one INFO, on a goroutine of its own. The test's
			// own INFO calls (to read the stats) are left out: a reply counts
			// those before it.
			own := 0
			limiterInfos := func() int {
				n := redistest.CommandCalls(t, admin, "info") - own
				own++
				return n
			}
			waitFor(t, "INFO memory", func() bool { return limiterInfos() > 0 })
			got := func() []error {
				mu.Lock()
				defer mu.Unlock()
				return append([]error(nil), reports...)
			}
			if !tc.reported {
				time.Sleep(50 * time.Millisecond) // the INFO's answer, read
				assert.Empty(t, got())
				return
			}
			waitFor(t, "the report", func() bool { return len(got()) > 0 })
			err := got()[0]
			require.ErrorIs(t, err, ErrStorageEvicts)
			assert.Contains(t, err.Error(), tc.policy)
			assert.Contains(t, err.Error(), srv.Addr())
			assert.Contains(t, err.Error(), "noeviction")

			// Not again at once: the next look is an hour away.
			for range 100 {
				_, _ = replica.Take(context.Background(), "more", 1)
			}
			time.Sleep(50 * time.Millisecond)
			assert.Len(t, got(), 1)
			assert.Equal(t, 1, limiterInfos(), "the limiter's INFO calls")
		})
	}
}

// Without OnStorageError, the warning goes to the standard logger.
func TestEvictingRedisIsLogged(t *testing.T) {
	evictionLooks.Clear()
	srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu")
	var buf bytes.Buffer
	var mu sync.Mutex
	prev, flags := log.Writer(), log.Flags()
	log.SetOutput(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) }))
	t.Cleanup(func() { log.SetOutput(prev); log.SetFlags(flags) })
	replica := redisLimiter(t, Config{Name: "logged", Limits: []Limit{PerMinute(10)}, Storage: redis.New(srv.Client(t))})
	requireAllowed(t, replica, "first")
	waitFor(t, "the log line", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Contains(buf.Bytes(), []byte("allkeys-lfu"))
	})
	assert.Contains(t, buf.String(), ErrStorageEvicts.Error())
}

// writerFunc is an io.Writer of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A server that refuses INFO (an ACL user without it) cannot be checked:
// that is said once, and the limiter goes on deciding in Redis.
func TestEvictionUncheckable(t *testing.T) {
	evictionLooks.Clear()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">secret", "~*", "+@all", "-info").Err())
	conn := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "limiter", Password: "secret"})
	t.Cleanup(func() { _ = conn.Close() })
	client := redis.New(conn)
	var mu sync.Mutex
	var reports []error
	replica := redisLimiter(t, Config{
		Name: "uncheckable", Limits: []Limit{PerMinute(10)}, Storage: client,
		OnStorageError: func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() },
	})
	requireAllowed(t, replica, "first")
	waitFor(t, "the report", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > 0 })
	mu.Lock()
	err := reports[0]
	mu.Unlock()
	assert.False(t, errors.Is(err, ErrStorageEvicts))
	assert.Contains(t, err.Error(), "NOPERM")
	assert.Contains(t, err.Error(), "noeviction")
	requireAllowed(t, replica, "first")
	res := requireAllowed(t, replica, "first")
	assert.Equal(t, 7, res.Tightest().Remaining, "decided in Redis")
	assert.Equal(t, SourceBackend, res.Source())
}

// Limiters of one process that share a Redis look at it, and warn, once
// between them: three limiters, each deciding, make one INFO and one
// report in all.
func TestEvictionLookedAtOncePerRedis(t *testing.T) {
	evictionLooks.Clear()
	srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	admin := srv.Client(t)
	var mu sync.Mutex
	var reports []error
	var replicas []func()
	for _, name := range []string{"burst", "hourly", "login"} {
		replica := redisLimiter(t, Config{
			Name: name, Limits: []Limit{PerMinute(10)}, Storage: redis.New(srv.Client(t)),
			OnStorageError: func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() },
		})
		replicas = append(replicas, func() { requireAllowed(t, replica, "k") })
	}
	for _, decide := range replicas {
		decide()
	}
	waitFor(t, "the report", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > 0 })
	for range 3 {
		for _, decide := range replicas {
			decide()
		}
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	assert.Len(t, reports, 1)
	mu.Unlock()
	assert.Equal(t, 1, redistest.CommandCalls(t, admin, "info"))
}

// The look is shared by the limiters of one ACL user only: a user that may
// not run INFO cannot look, and that does not keep a limiter of another
// user on the same Redis from being told that it evicts.
func TestEvictionLookedAtPerUser(t *testing.T) {
	evictionLooks.Clear()
	srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">secret", "~*", "+@all", "-info").Err())
	noInfo := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: "noinfo", Password: "secret"})
	t.Cleanup(func() { _ = noInfo.Close() })
	var mu sync.Mutex
	reports := map[string][]error{}
	limiter := func(name string, conn *goredis.Client) func() {
		replica := redisLimiter(t, Config{
			Name: name, Limits: []Limit{PerMinute(10)}, Storage: redis.New(conn),
			OnStorageError: func(err error) { mu.Lock(); reports[name] = append(reports[name], err); mu.Unlock() },
		})
		return func() { requireAllowed(t, replica, "k") }
	}
	first, second := limiter("a", noInfo), limiter("b", srv.Client(t))
	first()
	waitFor(t, "a's report", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports["a"]) > 0 })
	second()
	waitFor(t, "b's report", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports["b"]) > 0 })
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, reports["a"][0].Error(), "NOPERM")
	assert.ErrorIs(t, reports["b"][0], ErrStorageEvicts)
}
