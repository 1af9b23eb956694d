package redis

import (
	"context"
	"errors"
	"strings"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/redis/go-redis/v9"
)

// A pipeline of calls to one node does not send a script call each: the
// calls of one algorithm whose keys share a hash slot go as one call of
// the algorithm's batch script, which decides them in the order they came,
// each as the single script would, under one TIME and one script
// dispatch, with one read and one write of each key however many calls it
// has in the batch. That is what a script call costs Redis beyond its arithmetic,
// several microseconds of CPU, and what caps a hot key: its calls were one
// script call each. Calls for one key see each other's writes, in arrival
// order, so each gets its own exact decision.
//
// The batch script is the single script as a function of its key and
// argument, called for each KEYS[i] and ARGV[i]; its answer is the array of
// the single script's answers, in which a call's own error (a key of
// another type) is an error reply of that call alone. The writes wait for
// the end of the batch; a write that Redis refuses (out of memory, under
// noeviction) fails the calls of that key from the first that wrote it,
// which were decided on a value never stored, and only those: a denial
// that wrote nothing stands, as it would alone. A batch holds at most
// maxBatch calls, so that none keeps Redis busy for long.
//
// Keys in Redis Cluster must share a slot to go in one script call (else
// CROSSSLOT), and a Ring shards by key: on those, a batch holds one slot's
// calls, and calls to other slots go beside it in the same pipeline.

// batchSources are the batch scripts of the algorithms, and batchScripts
// their digests for EVALSHA.
var (
	batchSources = [...]string{
		redisengine.FixedWindow:   batchOf(scriptSources[redisengine.FixedWindow]),
		redisengine.SlidingWindow: batchOf(scriptSources[redisengine.SlidingWindow]),
		redisengine.TokenBucket:   batchOf(scriptSources[redisengine.TokenBucket]),
		redisengine.SlidingLog:    batchOf(scriptSources[redisengine.SlidingLog]),
	}
	batchScripts = [...]*redis.Script{
		redisengine.FixedWindow:   redis.NewScript(batchSources[redisengine.FixedWindow]),
		redisengine.SlidingWindow: redis.NewScript(batchSources[redisengine.SlidingWindow]),
		redisengine.TokenBucket:   redis.NewScript(batchSources[redisengine.TokenBucket]),
		redisengine.SlidingLog:    redis.NewScript(batchSources[redisengine.SlidingLog]),
	}
)

// batchOf makes the batch script of a single script: its body becomes a
// function of the key and the argument; TIME is read once per batch; and
// a key's value is read once and written once per batch, however many of
// its calls the batch holds: reads after the first see the value the calls
// before left, and the last value is written when every call has been
// decided (or before a PTTL of the key, on the rare paths that ask it).
func batchOf(single string) string {
	var pairs []string
	for _, r := range append(plainReplaced, batchReplaced...) {
		pairs = append(pairs, r[0], r[1])
	}
	at := strings.Index(single, batchPerCall)
	prelude, body := single[:at], strings.NewReplacer(pairs...).Replace(single[at:])
	return prelude + `local batch_clock
local function batch_time()
  if not batch_clock then
    -- As numbers, so that the calls do not each parse the strings.
    local t = redis.call('TIME')
    batch_clock = {tonumber(t[1]), tonumber(t[2])}
  end
  return batch_clock
end
-- values: a key's value as the batch has it (false: none); pending: the
-- PX of a write not made yet (-1: a DEL), in order.
local batch_values, batch_pending, batch_order = {}, {}, {}
-- batch_i is the call being decided; batch_first[k] the first call that
-- wrote k, and batch_failed[k] the error of k's write, if Redis refused it
-- (out of memory): every call on k from batch_first[k] on was decided on a
-- value that was never stored, and gets that error.
local batch_i, batch_first, batch_failed = 0, {}, {}
local function batch_get(k)
  local v = batch_values[k]
  if v ~= nil then
    return v
  end
  v = redis.pcall('GET', k)
  if type(v) ~= 'table' then
    batch_values[k] = v
  end
  return v
end
local function batch_write(k, v, px)
  if batch_pending[k] == nil then
    batch_order[#batch_order + 1] = k
  end
  if batch_first[k] == nil then
    batch_first[k] = batch_i
  end
  batch_values[k], batch_pending[k] = v, px
end
local function batch_flush(k)
  local px = batch_pending[k]
  if px == nil then
    return
  end
  batch_pending[k] = nil
  local done
  if px < 0 then
    done = redis.pcall('DEL', k)
  else
    done = redis.pcall('SET', k, batch_values[k], 'PX', px)
  end
  if type(done) == 'table' and done.err then
    batch_failed[k] = batch_failed[k] or done
  end
end
local function batch_pttl(k)
  batch_flush(k)
  return redis.call('PTTL', k)
end
local function batch_one(batch_key, batch_arg)
` + body + `
end
local answers = {}
for i = 1, #KEYS do
  batch_i = i
  answers[i] = batch_one(KEYS[i], ARGV[i])
end
for _, k in ipairs(batch_order) do
  batch_flush(k)
end
-- A call's error goes back as a string that no answer begins with (an
-- answer's first byte is at most 31), not as an error reply inside the
-- array: go-redis stops reading an array at an element it reads as one of
-- its typed errors (OOM, LOADING, ...).
for i = 1, #KEYS do
  local failed = batch_failed[KEYS[i]]
  if failed and i >= batch_first[KEYS[i]] then
    answers[i] = failed
  end
  if type(answers[i]) == 'table' then
    answers[i] = '\255' .. (answers[i].err or 'ERR limiter: no answer')
  end
end
return answers
`
}

// batchPerCall begins the part of a single script that runs once per
// call; what comes before it (the library's functions as locals) a batch
// script makes once.
const batchPerCall = "-- What follows runs once per call"

// batchReplaced are the pieces of the single scripts that batchOf
// replaces, each of which must be there, and what replaces them.
var batchReplaced = [][2]string{
	{"KEYS[1]", "batch_key"},
	{"ARGV[1]", "batch_arg"},
	{"local turn_arg = ARGV[2]", "local turn_arg = nil"}, // a take with a turn goes alone
	{"redis.call('TIME')", "batch_time()"},
	{"redis.pcall('GET', key)", "batch_get(key)"},
	{"redis.call('SET', key, value, 'PX', exp_all - request_now)", "batch_write(key, value, exp_all - request_now)"},
	{"redis.call('DEL', key)", "batch_write(key, false, -1)"},
	{"redis.call('PTTL', key)", "batch_pttl(key)"},
	// An idempotent take goes alone, never in a batch.
	{"redis.pcall('GET', KEYS[2])", "error('limiter: an idempotent take is never batched')"},
	{"redis.call('SET', KEYS[2], once_tag .. first_answer .. pack('<I5B', first_cost, repeats + 1), 'KEEPTTL')", "error('limiter: an idempotent take is never batched')"},
	{"redis.call('SET', KEYS[2], once_tag .. reply .. pack('<I5B', request_cost, 0), 'PX', once_ms)", "error('limiter: an idempotent take is never batched')"},
}

// plainReplaced are the pieces of the plain take (plain_head.lua and
// plain_tail.lua; every algorithm's but the log's) that batchOf replaces.
var plainReplaced = [][2]string{
	{"#ARGV == 1", "true"}, // a call in a batch has one argument
	{"redis.call('SET', key, value, 'PX', px)", "batch_write(key, value, px)"},
}

// batchGroup is the calls of one algorithm and slot in a pipeline, and
// the command that carries them (nil for a call that goes alone).
type batchGroup struct {
	alg   redisengine.Algorithm
	slot  int
	calls []*batchedCall
	cmd   *redis.SliceCmd
}

// maxBatch is the most calls one batch script call decides: about 1 ms of
// Redis's time.
const maxBatch = 128

// groupCalls groups calls by algorithm and, when bySlot, by hash slot, in
// the order they came, at most maxBatch to a group; without batches, each
// call is a group of its own. Calls of one key stay in order: a later
// group of the same algorithm and slot runs after an earlier one.
func groupCalls(calls []*batchedCall, bySlot, batches bool) []*batchGroup {
	var groups []*batchGroup
	for _, c := range calls {
		if !batches {
			groups = append(groups, &batchGroup{alg: c.alg, calls: []*batchedCall{c}})
			continue
		}
		slot := 0
		if bySlot {
			slot = hashSlot(c.key)
		}
		var g *batchGroup
		for i := len(groups) - 1; i >= 0; i-- {
			if o := groups[i]; o.alg == c.alg && o.slot == slot {
				if len(o.calls) < maxBatch {
					g = o
				}
				break
			}
		}
		if g == nil {
			g = &batchGroup{alg: c.alg, slot: slot}
			groups = append(groups, g)
		}
		g.calls = append(g.calls, c)
	}
	return groups
}

// queue adds g to pipe: its call alone as the single script (the
// cheaper of the two for one call), or all of them as one call of the
// batch script, by name ("evalsha" or "eval").
func (g *batchGroup) queue(ctx context.Context, pipe redis.Pipeliner, name string) {
	if len(g.calls) == 1 {
		c := g.calls[0]
		script := scripts[c.alg].Hash()
		if name == "eval" {
			script = scriptSources[c.alg]
		}
		c.cmd = scriptCmd(ctx, name, script, c.arg, c.key)
		_ = pipe.Process(ctx, c.cmd)
		return
	}
	script := batchScripts[g.alg].Hash()
	if name == "eval" {
		script = batchSources[g.alg]
	}
	args := make([]any, 0, 3+2*len(g.calls))
	args = append(args, name, script, len(g.calls))
	for _, c := range g.calls {
		args = append(args, c.key)
	}
	for _, c := range g.calls {
		args = append(args, c.arg)
	}
	g.cmd = redis.NewSliceCmd(ctx, args...)
	g.cmd.SetFirstKeyPos(3) // for Redis Cluster's routing
	_ = pipe.Process(ctx, g.cmd)
}

// answer gives each call of a batch its part of the batch's answer.
func (g *batchGroup) answer(ctx context.Context) {
	if g.cmd == nil {
		return
	}
	answers, err := g.cmd.Result()
	for i, c := range g.calls {
		c.cmd = redis.NewStringCmd(ctx)
		switch {
		case err != nil:
			c.cmd.SetErr(err)
		case i >= len(answers):
			c.cmd.SetErr(errShortBatch)
		default:
			switch a := answers[i].(type) {
			case string:
				if msg, failed := strings.CutPrefix(a, batchErrorMark); failed {
					c.cmd.SetErr(batchReplyError(msg))
				} else {
					c.cmd.SetVal(a)
				}
			case error:
				c.cmd.SetErr(a)
			default:
				c.cmd.SetErr(errShortBatch)
			}
		}
	}
}

// batchErrorMark begins a batch answer that is a call's error reply.
const batchErrorMark = "\xff"

// batchReplyError is a call's error reply from a batch: the server's reply
// to that call, as a go-redis error reply is (redis.Error), so that it is
// told apart from the network's errors in the same way.
type batchReplyError string

func (e batchReplyError) Error() string { return string(e) }

// RedisError marks e as a reply of the server.
func (batchReplyError) RedisError() {}

// errShortBatch is the error of a call that a batch's answer has no
// string for: never, from the batch scripts.
var errShortBatch = errors.New("limiter: redis: the batch script's answer has no part for this call")

// hashSlot is the Redis Cluster slot of key: CRC16 of its hash tag (the
// part between the first '{' and the next '}', when not empty) or of the
// whole key, mod 16384.
func hashSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key)) % 16384
}

// crc16 is CRC-16/XMODEM of s, as Redis Cluster computes a key's slot.
func crc16[T string | []byte](s T) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

// crc16Table is crc16's table: the CRC of each byte's value as a first byte.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
