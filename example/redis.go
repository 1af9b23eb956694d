package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/storage/redis"
	goredis "github.com/redis/go-redis/v9"
)

// pingTimeout bounds the PING sent at start for each replica.
const pingTimeout = 3 * time.Second

// redisTarget is where -redis points, without its credentials: what the
// startup message may print.
type redisTarget struct {
	Addr string // host:port
	DB   int
}

// String is "host:port db N".
func (r redisTarget) String() string { return r.Addr + " db " + strconv.Itoa(r.DB) }

// cli is a redis-cli command line for args on this server and database.
func (r redisTarget) cli(args string) string {
	host, port, err := net.SplitHostPort(r.Addr)
	if err != nil {
		host, port = r.Addr, "6379"
	}
	return fmt.Sprintf("redis-cli -h %s -p %s -n %d %s", host, port, r.DB, args)
}

// openRedis connects a new go-redis client to rawURL (redis://host:port/db
// or rediss://...) after pinging the server, so that an unreachable Redis
// stops the program at start rather than sending every request to the
// fallback. Each replica calls it for a client of its own, as separate
// processes would have.
func openRedis(ctx context.Context, rawURL string) (*redis.Store, redisTarget, error) {
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		return nil, redisTarget{}, fmt.Errorf("-redis: %w", err)
	}
	// Lets a call return at the limiter's StorageTimeout by itself, so
	// the limiter need not run it on a goroutine of its own.
	opts.ContextTimeoutEnabled = true
	target := redisTarget{Addr: opts.Addr, DB: opts.DB}
	if err := pingOnce(ctx, *opts); err != nil {
		return nil, target, fmt.Errorf("cannot reach Redis at %s (from -redis): %w", target, err)
	}
	return redis.New(goredis.NewClient(opts)), target, nil
}

// pingOnce sends one PING with a client of opts that neither dials nor
// sends again, so that a wrong address fails at once rather than after the
// retries (about 2 s) a serving client makes.
func pingOnce(ctx context.Context, opts goredis.Options) error {
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	opts.PoolSize = 1
	client := goredis.NewClient(&opts)
	defer func() { _ = client.Close() }() // a one-off probe: only its PING's answer matters
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return client.Ping(ctx).Err()
}
