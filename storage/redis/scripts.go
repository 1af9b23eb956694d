package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/redis/go-redis/v9"
)

// The scripts: each algorithm's fragment between head.lua and tail.lua
// (the sliding log's after its prelude), embedded from the .lua files,
// run with EVALSHA and, when the server does not have them, EVAL. The
// batch scripts that pipelines send are made from these (batch.go).

var (
	//go:embed head.lua
	headLua string
	//go:embed tail.lua
	tailLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window.lua
	slidingWindowLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
	//go:embed sliding_log_prelude.lua
	slidingLogPreludeLua string
	//go:embed sliding_log.lua
	slidingLogLua string
	//go:embed forget_record.lua
	forgetRecordLua string
	//go:embed plain_head.lua
	plainHeadLua string
	//go:embed plain_tail.lua
	plainTailLua string
	//go:embed fixed_window_plain.lua
	fixedWindowPlainLua string
	//go:embed sliding_window_plain.lua
	slidingWindowPlainLua string
	//go:embed token_bucket_plain.lua
	tokenBucketPlainLua string
)

// forgetRecordScript is the script of ForgetRecord.
var forgetRecordScript = redis.NewScript(forgetRecordLua)

// scriptSources are the scripts of the algorithms, and scripts their
// SHA-1 digests for EVALSHA.
var (
	scriptSources = [...]string{
		redisengine.FixedWindow:   stateSizes(10, 10) + withPlain(headLua, fixedWindowPlainLua) + fixedWindowLua + tailLua,
		redisengine.SlidingWindow: stateSizes(14, 12) + withPlain(headLua, slidingWindowPlainLua) + slidingWindowLua + tailLua,
		redisengine.TokenBucket:   stateSizes(13, 11) + withPlain(headLua, tokenBucketPlainLua) + tokenBucketLua + tailLua,
		redisengine.SlidingLog:    stateSizes(-1, -1) + slidingLogPreludeLua + withPlain(headLua, "") + slidingLogLua + tailLua,
	}
	scripts = [...]*redis.Script{
		redisengine.FixedWindow:   redis.NewScript(scriptSources[redisengine.FixedWindow]),
		redisengine.SlidingWindow: redis.NewScript(scriptSources[redisengine.SlidingWindow]),
		redisengine.TokenBucket:   redis.NewScript(scriptSources[redisengine.TokenBucket]),
		redisengine.SlidingLog:    redis.NewScript(scriptSources[redisengine.SlidingLog]),
	}
)

// stateSizes is the line that begins an algorithm's script: the bytes of
// a limit's state in a value (per, n limits of them) and of a lone limit's
// (one), which head.lua reads a value's layout by.
func stateSizes(per, one int) string {
	return fmt.Sprintf("local state_size, state_size1 = %d, %d\n", per, one)
}

// plainMark is the line of head.lua where an algorithm's plain take goes.
const plainMark = "-- [plain take]\n"

// withPlain is head with the plain take of an algorithm whose plain
// fragment is fragment, between plain_head.lua and plain_tail.lua; with
// none ("", the log's), head alone.
func withPlain(head, fragment string) string {
	if !strings.Contains(head, plainMark) {
		panic("limiter: redis: head.lua has no " + plainMark)
	}
	if fragment == "" {
		return strings.Replace(head, plainMark, "", 1)
	}
	return strings.Replace(head, plainMark, plainHeadLua+fragment+plainTailLua, 1)
}

// runScript calls alg's script for key with arg in one round trip: EVALSHA,
// or after a restart or SCRIPT FLUSH, when the server answers NOSCRIPT,
// EVAL.
func runScript(ctx context.Context, client redis.UniversalClient, alg redisengine.Algorithm, key, arg string) *redis.StringCmd {
	return runScriptWith(ctx, client, alg, arg, key)
}

// runScriptArgs is runScriptWith of several arguments.
func runScriptArgs(ctx context.Context, client redis.UniversalClient, alg redisengine.Algorithm, keys []string, args ...string) *redis.StringCmd {
	cmd := scriptCmdArgs(ctx, "evalsha", scripts[alg].Hash(), keys, args)
	_ = client.Process(ctx, cmd)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = scriptCmdArgs(ctx, "eval", scriptSources[alg], keys, args)
		_ = client.Process(ctx, cmd)
	}
	return cmd
}

// runScriptWith is runScript with the keys of the call: the limited key,
// then any other the call reads or writes (an idempotent take's record).
func runScriptWith(ctx context.Context, client redis.UniversalClient, alg redisengine.Algorithm, arg string, keys ...string) *redis.StringCmd {
	cmd := scriptCmd(ctx, "evalsha", scripts[alg].Hash(), arg, keys...)
	_ = client.Process(ctx, cmd)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = scriptCmd(ctx, "eval", scriptSources[alg], arg, keys...)
		_ = client.Process(ctx, cmd)
	}
	return cmd
}

// scriptCmd is EVAL or EVALSHA (name) of script with keys and arg.
func scriptCmd(ctx context.Context, name, script, arg string, keys ...string) *redis.StringCmd {
	return scriptCmdArgs(ctx, name, script, keys, []string{arg})
}

// scriptCmdArgs is scriptCmd of several arguments.
func scriptCmdArgs(ctx context.Context, name, script string, keys, argv []string) *redis.StringCmd {
	args := make([]any, 0, 3+len(keys)+len(argv))
	args = append(args, name, script, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	for _, a := range argv {
		args = append(args, a)
	}
	cmd := redis.NewStringCmd(ctx, args...)
	cmd.SetFirstKeyPos(3) // for Redis Cluster's routing: the limited key
	return cmd
}
