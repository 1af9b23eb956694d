package quota

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// redisReply is an error reply as go-redis gives it: an error with a
// RedisError method.
type redisReply string

func (r redisReply) Error() string { return string(r) }
func (redisReply) RedisError()     {}

// Which failures say the store is out of reach or out of service (they
// open the breaker) and which are its answer about one key (they do not):
// Redis 7's replies, Redis 6's replies of a script's redis.call (the code
// after "ERR Error running script ...: -"), and a timed-out call whatever
// its recorded cause.
func TestUnreachable(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{redisReply("OOM command not allowed when used memory > 'maxmemory'. script: 1234, on @user_script:45."), true},
		{redisReply("ERR Error running script (call to f_5d7b): @user_script:41: @user_script: 41: -OOM command not allowed when used memory > 'maxmemory'."), true},
		{redisReply("ERR Error running script (call to f_5d7b): @user_script:41: @user_script: 41: -READONLY You can't write against a read only replica."), true},
		{redisReply("ERR Error running script (call to f_5d7b): @user_script:12: user_script:12: bad argument #1"), false},
		{redisReply("WRONGPASS invalid username-password pair or user is disabled."), true},
		{redisReply("NOAUTH Authentication required."), true},
		{redisReply("ERR The user executing the script can't run this command or subcommand script: 1e2f, on @user_script:87."), true},
		{redisReply("NOPERM User svc has no permissions to run the 'time' command"), true},
		{redisReply("ERR The user executing the script can't access at least one of the keys mentioned in the command script: 1e2f, on @user_script:87."), true},
		{redisReply("ERR ACL failure in script: User notime has no permissions to run the 'time' command script: 1e2f, on @user_script:87."), true},
		{redisReply("ERR Error running script (call to f_1e2f): @user_script:87: @user_script: 87: The user executing the script can't run this command or subcommand"), true},
		{redisReply("ERR DB index is out of range"), true},
		{redisReply("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), true},
		{redisReply("BUSY Redis is busy running a script."), true},
		{redisReply("LOADING Redis is loading the dataset in memory"), true},
		{redisReply("WRONGTYPE limiter: the key holds a value of another type, not a rate-limit state"), false},
		{redisReply("BUSYKEY Target key name already exists."), false},
		{redisReply("ERR user_script:3: Script attempted to access nonexistent global variable"), false},
		{fmt.Errorf("limiter: redis take: %w", redisReply("OOM command not allowed")), true},
		{&timedOut{err: fmt.Errorf("x: %w", redisReply("ERR some reply")), timeout: time.Millisecond}, true},
		{ErrStorageTimeout, true},
		{errors.New("a storage's quick error"), false},
	}
	// As the guard reads an error of Redis, or of a Storage (redisFailure
	// for both).
	unreachable := func(err error, took time.Duration) bool { return unreachable(err, redisFailure(err), took) }
	for _, tc := range cases {
		assert.Equal(t, tc.want, unreachable(tc.err, 0), "%v", tc.err)
	}
	assert.True(t, unreachable(errors.New("a storage's slow error"), quickAnswer), "an error that made the call wait")
}
