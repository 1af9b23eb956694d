package redis

import (
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/internal/timestep"
	goredis "github.com/redis/go-redis/v9"
)

// The engine's contract under its own names, so that the tests read as
// redisengine's documentation does.
type (
	Rule      = redisengine.Rule
	Result    = redisengine.Result
	Algorithm = redisengine.Algorithm
)

const (
	FixedWindow   = redisengine.FixedWindow
	SlidingWindow = redisengine.SlidingWindow
	TokenBucket   = redisengine.TokenBucket
	SlidingLog    = redisengine.SlidingLog
	MaxLogLimit   = redisengine.MaxLogLimit
	Never         = timestep.Never
)

// base is the client clock's origin in the tests that use one. It has a
// sub-millisecond part (0.456789ms), which the store drops: base+d counts
// as the millisecond of base plus d for every whole-millisecond d.
var base = time.Unix(1_700_000_000, 123_456_789)

// ms is base+d in the scripts' milliseconds, as CountedIn reports it.
func ms(d time.Duration) int64 { return base.Add(d).UnixMilli() }

// clock is a settable client clock for WithClock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: base} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// at sets the clock to base+d.
func (c *clock) at(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = base.Add(d)
}

// newStore starts a redis-server and returns the engine of a Store on it
// with the given client clock (nil: the server's TIME), and a second client
// for looking at the server directly.
func newStore(t *testing.T, c *clock) (*engine, *goredis.Client, *redistest.Server) {
	t.Helper()
	server := redistest.Start(t)
	var opts []Option
	if c != nil {
		opts = append(opts, WithClock(c.now))
	}
	return New(server.Client(t), opts...).engine, server.Client(t), server
}

var algorithms = []struct {
	name string
	alg  Algorithm
}{
	{"fixed", FixedWindow},
	{"sliding", SlidingWindow},
	{"bucket", TokenBucket},
	{"log", SlidingLog},
}
