package redis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// plainSeed seeds TestPlainTakeMatchesTheGeneralPath.
var plainSeed uint64 = 33

// generalSources are the scripts without their plain take: every call on
// the general path, the plain take's twin.
var generalSources = map[Algorithm]string{
	FixedWindow:   stateSizes(10, 10) + withPlain(headLua, "") + fixedWindowLua + tailLua,
	SlidingWindow: stateSizes(14, 12) + withPlain(headLua, "") + slidingWindowLua + tailLua,
	TokenBucket:   stateSizes(13, 11) + withPlain(headLua, "") + tokenBucketLua + tailLua,
}

// plainValue is a random value for a key of alg at now (ms): nothing, a
// state near now in the plain take's form or another, one too far ahead
// or with counts above the limit, the ends of BlockFor or MinInterval, or
// bytes of no layout.
func plainValue(r *rand.Rand, alg Algorithm, now, limit int64) (string, bool) {
	near := func() int64 { return max(0, now+r.Int64N(8000)-6000) }
	count := func() int64 {
		if r.IntN(8) == 0 {
			return limit + r.Int64N(3) // above the limit at times
		}
		return r.Int64N(limit + 1)
	}
	var v []byte
	switch r.IntN(10) {
	case 0:
		return "", false
	case 1:
		return string([]byte{1, 2, 3, byte(r.IntN(256))}), true
	}
	switch alg {
	case FixedWindow:
		v = packLE(v, near(), 6, count(), 4)
	case SlidingWindow:
		if r.IntN(6) == 0 {
			v = packLE(v, near(), 6, count(), 4, count(), 4)
		} else {
			v = packLE(v, near(), 6, min(count(), 1<<24-1), 3, min(count(), 1<<24-1), 3)
		}
	case TokenBucket:
		debt := r.Int64N(limit*2000 + 1)
		if r.IntN(6) == 0 {
			v = packLE(v, near(), 6, debt, 7)
		} else {
			v = packLE(v, near(), 6, debt, 5)
		}
	}
	switch r.IntN(8) {
	case 0:
		v = packLE(v, near()+r.Int64N(2000), 6) // a BlockFor's or a MinInterval's end
	case 1:
		v = packLE(v, near()+r.Int64N(2000), 6, near()+r.Int64N(2000), 6)
	case 2:
		v[0] ^= 0xff // a time far ahead, or behind
		v[5] = byte(r.IntN(256))
	}
	return string(v), true
}

// packLE appends each (value, bytes) pair of pairs little-endian.
func packLE(v []byte, pairs ...int64) []byte {
	for i := 0; i < len(pairs); i += 2 {
		for b := range pairs[i+1] {
			v = append(v, byte(pairs[i]>>(8*b)))
		}
	}
	return v
}

// The plain take decides as the general path does: on random values
// (states near now and far from it, implausible ones, ends of key rules,
// bytes of no layout), rules (windows of 1 ms to 10 s, quotas up to ones
// kept in steps) and costs (0 to above the quota), alone and in batches,
// the answers and the values written are the same, and so is the key's
// TTL.
func TestPlainTakeMatchesTheGeneralPath(t *testing.T) {
	server := redistest.Start(t)
	rdb := server.Client(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(plainSeed, 1))
	for _, a := range algorithms[:3] {
		t.Run(a.name, func(t *testing.T) {
			plain := goredis.NewScript(scriptSources[a.alg])
			general := goredis.NewScript(generalSources[a.alg])
			plainBatch := goredis.NewScript(batchOf(scriptSources[a.alg]))
			generalBatch := goredis.NewScript(batchOf(generalSources[a.alg]))
			for _, s := range []*goredis.Script{plain, general, plainBatch, generalBatch} {
				require.NoError(t, s.Load(ctx, rdb).Err())
			}
			c := newClock()
			e := New(rdb, WithClock(c.now)).engine
			voided := 0
			defer func() { require.Less(t, voided, 30, "steps voided by a stalled machine") }()
			for step := range 3000 {
				limit := []int64{1, 2, 5, 100, 1 << 31}[r.IntN(5)]
				window := time.Duration(1+r.IntN(10_000)) * time.Millisecond
				rule := Rule{Algorithm: a.alg, Max: limit, Expiration: window}
				if a.alg == TokenBucket && r.IntN(3) == 0 {
					rule.Burst = limit + r.Int64N(limit+1)
				}
				c.at(time.Duration(r.IntN(600_000)) * time.Millisecond)
				now := c.now().UnixMilli()
				n := 1 + r.IntN(3) // calls of the step, on one key or two
				keys, args := make([]string, n), make([]any, n)
				for i := range n {
					cost := r.Int64N(limit + 3)
					if limit > 100 {
						cost = r.Int64N(5)
					}
					var buf [argMaxSize]byte
					arg, err := e.pack(&buf, []Rule{rule}, cost, 0, nil)
					require.NoError(t, err)
					keys[i], args[i] = fmt.Sprintf("k%d", r.IntN(2)), string(arg)
				}
				start := map[string]string{}
				for _, k := range keys {
					if _, ok := start[k]; !ok {
						v, found := plainValue(r, a.alg, now, max(limit, rule.Burst))
						if found {
							start[k] = v
						} else {
							start[k] = "\x00none"
						}
					}
				}
				// Each key's copies, p: for the plain take's script and g:
				// for the general path's, begin alike and expire at the
				// same time (PEXPIREAT), 1 to 21 s from now. Neither copy
				// may expire before both scripts have run and been looked
				// at: Redis 7.0 checks an expiry against its real clock
				// even inside a transaction, so one coming then can take
				// one copy and leave the other (see voided below).
				at := time.Now().UnixMilli()
				soonest := int64(math.MaxInt64)
				_, err := rdb.TxPipelined(ctx, func(tx goredis.Pipeliner) error {
					for k, v := range start {
						expires := at + 1000 + r.Int64N(20_000)
						soonest = min(soonest, expires)
						for _, prefix := range []string{"p:", "g:"} {
							tx.Del(ctx, prefix+k)
							if v != "\x00none" {
								tx.Set(ctx, prefix+k, v, 0)
								tx.PExpireAt(ctx, prefix+k, time.UnixMilli(expires))
							}
						}
					}
					return nil
				})
				require.NoError(t, err, "step %d", step)
				prefixed := func(prefix string) []string {
					out := make([]string, n)
					for i, k := range keys {
						out[i] = prefix + k
					}
					return out
				}
				// Both scripts, then what they left, in one transaction:
				// no key expires between them (Redis holds the time of
				// expiry still while a transaction runs).
				pSHA, gSHA := plain.Hash(), general.Hash()
				if n > 1 {
					pSHA, gSHA = plainBatch.Hash(), generalBatch.Hash()
				}
				var pRun, gRun *goredis.Cmd
				values, ends := map[string][2]*goredis.StringCmd{}, map[string][2]*goredis.DurationCmd{}
				var before, after *goredis.TimeCmd
				_, err = rdb.TxPipelined(ctx, func(tx goredis.Pipeliner) error {
					before = tx.Time(ctx)
					gRun = tx.EvalSha(ctx, gSHA, prefixed("g:"), args...)
					pRun = tx.EvalSha(ctx, pSHA, prefixed("p:"), args...)
					after = tx.Time(ctx)
					for k := range start {
						values[k] = [2]*goredis.StringCmd{tx.Get(ctx, "p:"+k), tx.Get(ctx, "g:"+k)}
						ends[k] = [2]*goredis.DurationCmd{tx.PExpireTime(ctx, "p:"+k), tx.PExpireTime(ctx, "g:"+k)}
					}
					return nil
				})
				if err != nil && err != goredis.Nil {
					require.NoError(t, err, "step %d", step)
				}
				if after.Val().UnixMilli()+1 >= soonest {
					// A machine stalled for a second: the copies may
					// differ by their expiry, not by the scripts.
					voided++
					continue
				}
				require.Equal(t, gRun.Err(), pRun.Err(), "step %d", step)
				require.Equal(t, gRun.Val(), pRun.Val(), "step %d: %d calls on %v, values %q", step, n, keys, start)
				for k := range start {
					pv, gv := values[k][0], values[k][1]
					require.Equal(t, gv.Err(), pv.Err(), "step %d key %s", step, k)
					require.Equal(t, gv.Val(), pv.Val(), "step %d key %s from %q", step, k, start[k])
					pe, ge := ends[k][0].Val(), ends[k][1].Val()
					if ge < 0 {
						require.Equal(t, ge, pe, "step %d key %s: no TTL, or no key", step, k)
						continue
					}
					// A write's PX counts from the ms it is made in: the
					// plain script's, after the general one's, up to the
					// transaction's length later.
					ms, gap := time.Millisecond, after.Val().Sub(before.Val()).Truncate(time.Millisecond)
					require.GreaterOrEqual(t, pe, ge-ms, "step %d key %s: kept less long; from %q, args %q", step, k, start[k], args)
					require.LessOrEqual(t, pe, ge+gap+ms, "step %d key %s: kept longer", step, k)
				}
			}
		})
	}
}

// A rolling deploy from the release before the plain take, whose scripts
// are generalSources (the same values and TTLs): replicas of both take turns on one key, under the
// server's clock, and admit exactly the limit, and the key keeps a TTL
// to its window's end at least.
func TestPlainTakeMeetsTheReleaseBefore(t *testing.T) {
	server := redistest.Start(t)
	rdb := server.Client(t)
	ctx := context.Background()
	store := New(server.Client(t), WithoutPipelining()).engine
	for _, a := range algorithms[:3] {
		t.Run(a.name, func(t *testing.T) {
			old := goredis.NewScript(generalSources[a.alg])
			rule := Rule{Algorithm: a.alg, Max: 50, Expiration: time.Hour}
			key := "turns:" + a.name
			admitted := 0
			for i := range 120 {
				if i%2 == 0 {
					var buf [argMaxSize]byte
					arg, err := store.pack(&buf, []Rule{rule}, 1, 0, nil)
					require.NoError(t, err)
					reply, err := old.Run(ctx, rdb, []string{key}, string(arg)).Text()
					require.NoError(t, err)
					admitted += int(reply[0] & 1)
				} else {
					r, err := store.Take(ctx, key, rule, 1)
					require.NoError(t, err)
					if r.Allowed {
						admitted++
					}
				}
				// The windows end an hour from their first take, or later;
				// the bucket refills a take in 72 s.
				need := 59 * time.Minute
				if a.alg == TokenBucket {
					need = time.Duration(admitted)*72*time.Second - time.Second
				}
				require.Greater(t, rdb.PTTL(ctx, key).Val(), need, "take %d", i)
			}
			require.Equal(t, 50, admitted)
		})
	}
}

// In a batch, calls of one key under the client's clock need not come in
// the order of their times: each call reads the clock when it is packed,
// before it joins the pipeline, so a call of a goroutine that was
// scheduled later may carry the earlier time. The plain take keeps the
// key as long as the general path, which writes the PX of its own time,
// does: here the second call is 30 s behind the first, in the same
// window, and its PX is 30 s longer.
func TestPlainTakeInABatchKeepsTheKeyAsLongOutOfOrder(t *testing.T) {
	server := redistest.Start(t)
	rdb := server.Client(t)
	ctx := context.Background()
	for _, a := range algorithms[:2] { // the windows: their plain take keeps a TTL
		t.Run(a.name, func(t *testing.T) {
			plainBatch := goredis.NewScript(batchOf(scriptSources[a.alg]))
			generalBatch := goredis.NewScript(batchOf(generalSources[a.alg]))
			for _, s := range []*goredis.Script{plainBatch, generalBatch} {
				require.NoError(t, s.Load(ctx, rdb).Err())
			}
			c := newClock()
			e := New(rdb, WithClock(c.now)).engine
			rule := Rule{Algorithm: a.alg, Max: 10, Expiration: time.Minute}
			var args []any
			for _, d := range []time.Duration{30 * time.Second, 0} {
				c.at(d)
				var buf [argMaxSize]byte
				arg, err := e.pack(&buf, []Rule{rule}, 1, 0, nil)
				require.NoError(t, err)
				args = append(args, string(arg))
			}
			p, g := "p:"+a.name, "g:"+a.name
			var pRun, gRun *goredis.Cmd
			var pEnd, gEnd *goredis.DurationCmd
			_, err := rdb.TxPipelined(ctx, func(tx goredis.Pipeliner) error {
				gRun = tx.EvalSha(ctx, generalBatch.Hash(), []string{g, g}, args...)
				pRun = tx.EvalSha(ctx, plainBatch.Hash(), []string{p, p}, args...)
				pEnd, gEnd = tx.PExpireTime(ctx, p), tx.PExpireTime(ctx, g)
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, gRun.Val(), pRun.Val())
			require.Equal(t, rdb.Get(ctx, g).Val(), rdb.Get(ctx, p).Val())
			require.GreaterOrEqual(t, pEnd.Val(), gEnd.Val()-time.Millisecond,
				"kept %v less long than the general path keeps it", gEnd.Val()-pEnd.Val())
		})
	}
}
