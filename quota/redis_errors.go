package quota

import (
	"errors"
	"io"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The errors of go-redis, read for the guard (guard.go), which knows no
// store's errors: which say that Redis did not run a call (a dial failed,
// or the server refused service), which that it is out of reach, and
// which are its answer about one key.

// classify is the Redis backend's reading of a failed call's error.
func (b *redisBackend) classify(err error) failureKind { return redisFailure(err) }

// redisFailure says what err, of a call through go-redis, tells of Redis:
// that it did not run the call (a dial failed, refused or out of time
// itself, or Redis refused service: see refusesService); that it answered
// about the key (another error reply, such as WRONGTYPE); that it is out
// of reach (a network error, a connection or pool closed or exhausted);
// or nothing.
func redisFailure(err error) failureKind {
	var op *net.OpError
	var reply goredis.Error // an error reply from the server
	isReply := errors.As(err, &reply)
	var netErr net.Error
	switch {
	case errors.As(err, &op) && op.Op == "dial", isReply && refusesService(reply.Error()):
		return failureNotRun
	case isReply:
		return failureAnswer
	case errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, goredis.ErrClosed), errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted):
		return failureOutOfReach
	}
	return failureUnknown
}

// outOfService are the beginnings of the Redis error replies that say the
// server, not the key, cannot serve the call: it is out of memory
// (maxmemory under noeviction) or cannot persist (MISCONF), the
// connection's credentials or database are refused (replies to AUTH, HELLO
// or SELECT while go-redis sets up a connection, which it then closes, so
// that every call would dial again), its ACL user may not run a command
// the script calls (GET, SET, TIME, ...), it is loading, busy with a script,
// read-only or cut off from its master or cluster, full of clients, or has
// no script commands.
var outOfService = [...]string{
	"OOM", "MISCONF",
	"NOAUTH", "WRONGPASS", "NOPERM", "ERR AUTH", "ERR Client sent AUTH", "ERR invalid password",
	// An ACL user's command refused inside a script: Redis 7.0's wording,
	// and 7.2's and Valkey's (Redis 6's is found within its wrapper, see
	// refusesService).
	"ERR " + scriptACLRefusal, "ERR ACL failure in script",
	"ERR DB index", "ERR invalid DB index",
	"LOADING", "BUSY ", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "NOREPLICAS",
	"ERR max number of clients", "ERR unknown command",
}

// scriptACLRefusal begins what Redis 6 and 7.0 say of a command, or a key,
// that the ACL user may not run or reach, in a script.
const scriptACLRefusal = "The user executing the script can't"

// refusesService tells whether a Redis error reply says that the server
// cannot serve calls now (see outOfService). Redis 6 and earlier give an
// error that a script's redis.call met as "ERR Error running script (...):
// ...: -OOM command not allowed ...": the reply's own code follows the
// last ": -".
func refusesService(reply string) bool {
	if strings.HasPrefix(reply, "ERR Error running script") {
		if strings.Contains(reply, scriptACLRefusal) {
			return true // Redis 6: an ACL user's command refused in the script
		}
		if i := strings.LastIndex(reply, ": -"); i >= 0 {
			reply = reply[i+3:]
		}
	}
	for _, prefix := range outOfService {
		if strings.HasPrefix(reply, prefix) {
			return true
		}
	}
	return false
}

// misconfigured reads err, a failed call's, for a refusal that Redis will
// keep making until the client or the server's settings change: it
// returns what to fix, or "" for any other error (Redis out of reach,
// busy, loading, out of memory: conditions that pass).
func misconfigured(err error) string {
	var reply goredis.Error
	if !errors.As(err, &reply) {
		return ""
	}
	msg := reply.Error()
	if strings.HasPrefix(msg, "ERR Error running script") && strings.Contains(msg, scriptACLRefusal) {
		msg = "NOPERM" // Redis 6's wording of a command refused in a script
	}
	for _, fix := range redisFixes {
		for _, prefix := range fix.replies {
			if strings.HasPrefix(msg, prefix) {
				return fix.fix
			}
		}
	}
	return ""
}

// redisFixes are the refusals of a misconfigured client or server, and
// what to fix for each.
var redisFixes = [...]struct {
	replies []string
	fix     string
}{
	{[]string{"WRONGPASS", "ERR invalid password", "ERR AUTH", "ERR Client sent AUTH"},
		"the client's Username or Password is not one the server accepts: fix them in the go-redis options"},
	{[]string{"NOAUTH"}, "the server requires a password: set the client's Password (and Username, for an ACL user) in the go-redis options"},
	{[]string{"NOPERM", "ERR " + scriptACLRefusal, "ERR ACL failure in script"},
		"the client's ACL user may not run what the limiter needs: allow it EVALSHA and EVAL, and within scripts GET, SET, DEL, PEXPIRE, PTTL and TIME, on keys under KeyPrefix (as: ACL SETUSER <user> +evalsha +eval +get +set +del +pexpire +pttl +time ~limiter:*)"},
	{[]string{"ERR DB index", "ERR invalid DB index"}, "the client's DB is not a database of the server: use a DB below the server's `databases` setting (16 by default)"},
	{[]string{"ERR unknown command"}, "the server has no EVALSHA or EVAL (renamed or disabled): the limiter decides with Lua scripts, and needs them"},
}
