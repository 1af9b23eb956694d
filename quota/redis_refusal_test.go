package quota

import (
	"bytes"
	"context"
	"log"
	"strings"
	"sync"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Redis that answers but refuses the limiter, as a misconfigured client
// or server does, is New's error, wrapping ErrRedisRefused and Redis's own
// words, and saying what to fix.
func TestNewReportsRedisRefusal(t *testing.T) {
	redisChecks.Clear() // a port used before may be remembered as answering
	srv := redistest.Start(t, "--requirepass", "secret")
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Password: "secret"})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "+@all", "-evalsha", "-eval").Err())
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "notime", "on", ">pw", "~*", "+@all", "-time").Err())
	for _, tc := range []struct {
		name           string
		user, password string
		db             int
		reply, fix     string
	}{
		{"wrong password", "", "wrong", 0, "WRONGPASS", "Username or Password"},
		{"no password", "", "", 0, "NOAUTH", "requires a password"},
		{"no EVALSHA", "noscript", "pw", 0, "NOPERM", "ACL user"},
		{"no TIME in scripts", "notime", "pw", 0, "", "ACL user"},
		{"DB out of range", "", "secret", 9999, "DB index is out of range", "databases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Username: tc.user, Password: tc.password, DB: tc.db})
			t.Cleanup(func() { _ = client.Close() })
			l, err := New(Config{Limits: []Limit{PerMinute(10)}, Redis: client})
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, ErrRedisRefused)
			assert.ErrorContains(t, err, tc.reply)
			assert.ErrorContains(t, err, tc.fix)
			assert.True(t, strings.HasPrefix(err.Error(), "limiter: "), err.Error())
			// With the check off, New builds the limiter, whose takes fail.
			l, err = New(Config{Limits: []Limit{PerMinute(10)}, Redis: client, DisableRedisCheck: true, OnStorageError: func(error) {}})
			require.NoError(t, err)
			res, err := l.Take(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, SourceFallback, res.Source())
		})
	}
}

// A Redis out of reach is no error at New (replicas may start before it):
// the failed call is logged without OnStorageError, or given to it.
func TestNewStartsWithRedisOutOfReach(t *testing.T) {
	redisChecks.Clear()
	srv := redistest.Start(t)
	client := srv.Client(t)
	srv.Stop()
	logs := captureLog(t)
	l, err := New(Config{Name: "unreached", Limits: []Limit{PerMinute(10)}, Redis: client})
	require.NoError(t, err)
	require.NotNil(t, l)
	assert.Contains(t, logs.lines(srv.Addr()), "did not answer New's call")

	var reports storageErrors
	other := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DB: 1})
	t.Cleanup(func() { _ = other.Close() })
	_, err = New(Config{Name: "unreached2", Limits: []Limit{PerMinute(10)}, Redis: other, OnStorageError: reports.hook})
	require.NoError(t, err)
	require.Len(t, reports.all(), 1)
	assert.ErrorContains(t, reports.all()[0], srv.Addr())
}

// Without OnStorageError, failed calls go to the standard logger: the
// first at once, then at most one line a second, however many fail.
func TestStorageFailuresAreLoggedRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	srv.Stop()
	logs := captureLog(t)
	l, err := New(Config{Name: "logged", Limits: []Limit{PerMinute(10)}, Redis: client, DisableRedisCheck: true, BreakerFailures: 1 << 30})
	require.NoError(t, err)
	for range 1000 {
		res, err := l.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		require.Equal(t, SourceFallback, res.Source())
	}
	lines := strings.Count(logs.lines(srv.Addr()), "\n")
	assert.GreaterOrEqual(t, lines, 1, "the failures were logged")
	assert.LessOrEqual(t, lines, 10, "at most one line a second")
}

// logCapture holds what the standard logger wrote during a test.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// captureLog sends the standard logger's output to the returned capture
// until the test ends.
func captureLog(t *testing.T) *logCapture {
	c := &logCapture{}
	prev, flags := log.Writer(), log.Flags()
	log.SetOutput(writerFunc(func(p []byte) (int, error) { c.mu.Lock(); defer c.mu.Unlock(); return c.buf.Write(p) }))
	t.Cleanup(func() { log.SetOutput(prev); log.SetFlags(flags) })
	return c
}

// lines returns the lines that contain s, each ending with "\n".
func (c *logCapture) lines(s string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, line := range strings.SplitAfter(c.buf.String(), "\n") {
		if strings.Contains(line, s) {
			b.WriteString(line)
		}
	}
	return b.String()
}
