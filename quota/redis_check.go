package quota

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// New calls Redis once, before it returns, so that a Redis that answers
// but refuses the limiter (a wrong password, an ACL user without the
// script commands, a database that does not exist) is New's error, not a
// silent fallback on every replica. A Redis out of reach is no error:
// replicas may start before it; the failure is reported as a failed call
// is (OnStorageError, or the log). A client that answered is not asked
// again by this process within a minute, nor one found out of reach.

// ErrRedisRefused is wrapped by New's error when Redis answers but refuses
// the limiter's call, as a misconfigured client or server does: wrong or
// missing credentials (WRONGPASS, NOAUTH), an ACL user without a command
// the limiter runs (NOPERM), a DB the server does not have, or no script
// commands. The error says what to fix.
var ErrRedisRefused = errors.New("limiter: Redis refused the limiter's call")

// redisCheckTimeout bounds New's call to Redis, whatever StorageTimeout
// is: the call only has to tell a refusal from other failures. A first
// call may dial, with TLS and AUTH, which a decision on a pooled
// connection does not.
const redisCheckTimeout = time.Second

// redisCheckAgain is how long (ms) a client that New had an answer from,
// or found out of reach, is not asked again (by a limiter built per
// request, say).
const redisCheckAgain = 60 * 1000

// redisChecks holds, by redisCheckKey, until when (Unix ms) New need not
// call that Redis again; redisChecked counts its entries, which are
// dropped all at once past redisChecksMost (clients made per New, each a
// store of its own, would otherwise add entries for good).
var (
	redisChecks  sync.Map
	redisChecked atomic.Int64
)

const redisChecksMost = 4096

var redisCheckSeed = maphash.MakeSeed()

// redisCheckKey names a client for redisChecks: the store it reaches,
// and the credentials it gives (hashed), so that another client of the
// same server with other credentials is asked again.
func redisCheckKey(client goredis.UniversalClient) string {
	user, password := credentials(client)
	return fmt.Sprintf("%s user %q %x", storeIdentity(client), user, maphash.String(redisCheckSeed, password))
}

// credentials are the ACL user and password client gives, "" for a
// client of another kind.
func credentials(client goredis.UniversalClient) (user, password string) {
	switch c := client.(type) {
	case *goredis.Client:
		return c.Options().Username, c.Options().Password
	case *goredis.ClusterClient:
		return c.Options().Username, c.Options().Password
	case *goredis.Ring:
		return c.Options().Username, c.Options().Password
	}
	return "", ""
}

// checkRedis makes New's call to the Redis of b, reached through field
// (Config.Redis, RedisStore or Storage), unless this process has had an
// answer from it already. It returns an error wrapping ErrRedisRefused
// when Redis refuses the call as a misconfigured client or server would;
// any other failure goes to g's reporter.
func (g *guardedStore) checkRedis(b *redisBackend, field string) error {
	key := redisCheckKey(b.engine.Conn())
	now := time.Now().UnixMilli()
	if until, ok := redisChecks.Load(key); ok && now < until.(int64) {
		return nil
	}
	timeout := redisCheckTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// The dial and the call run on a goroutine of their own, which New
	// stops waiting for at the bound: a client that does not honour the
	// context (a ClusterClient without ContextTimeoutEnabled, a Dialer that
	// ignores it) returns by its own timeouts, later.
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("limiter: New's call to Redis panicked: %v", p)
			}
		}()
		err := dialCheck(ctx, b.engine.Conn())
		if err == nil {
			err = b.probe(ctx)
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout + dialCheckTimeout):
		err = fmt.Errorf("%w (%v)", ErrStorageTimeout, timeout)
	}
	switch fix := misconfigured(err); {
	case err == nil:
		rememberCheck(key, now+redisCheckAgain)
	case fix != "":
		return fmt.Errorf("%w: %s: %w; %s", ErrRedisRefused, field, err, fix)
	default:
		rememberCheck(key, now+redisCheckAgain)
		g.reporter.failed(g.now(), fmt.Errorf("limiter: Redis did not answer New's call (the limiter starts; FailurePolicy decides until Redis answers): %w", err), false)
	}
	return nil
}

// rememberCheck keeps until for key in redisChecks.
func rememberCheck(key string, until int64) {
	if _, had := redisChecks.Swap(key, until); had {
		return
	}
	if redisChecked.Add(1) > redisChecksMost {
		redisChecks.Clear()
		redisChecked.Store(0)
	}
}

// dialCheck dials the server of a plain client, as the client would, and
// returns the error of a dial that fails: the client itself would retry a
// refused dial until ctx ends, and then say only that it did.
func dialCheck(ctx context.Context, client goredis.UniversalClient) error {
	c, ok := client.(*goredis.Client)
	if !ok {
		return nil
	}
	opts := c.Options()
	if opts.Addr == "FailoverClient" {
		return nil // the master is Sentinel's to name
	}
	conn, err := opts.Dialer(ctx, opts.Network, opts.Addr)
	if err != nil {
		return fmt.Errorf("limiter: redis: cannot connect to %s: %w", opts.Addr, err)
	}
	_ = conn.Close()
	return nil
}
