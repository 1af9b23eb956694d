package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logValue packs logs as sliding_log.lua keeps them: per limit a 2-byte
// count, then 6-byte times (LE), then the suffix (6-byte LE each).
func logValue(logs [][]int64, suffix ...int64) string {
	var b []byte
	for _, l := range logs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(l)))
		for _, t := range l {
			var x [8]byte
			binary.LittleEndian.PutUint64(x[:], uint64(t))
			b = append(b, x[:6]...)
		}
	}
	for _, t := range suffix {
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], uint64(t))
		b = append(b, x[:6]...)
	}
	return string(b)
}

// RT1: a foreign log value whose entries are out of order (its newest, the
// last, is in the past, so it passes the "ahead" check) holds the key off
// far longer than the rule: Retry-After of decades, for as long as the
// value lives (here no TTL: forever).
func TestZZLogUnsortedForeignValueLocksOut(t *testing.T) {
	c := newClock()
	store, admin, _ := newStore(t, c)
	ctx := context.Background()
	rule := Rule{Algorithm: SlidingLog, Limit: 3, Window: time.Second}
	now := ms(0)
	far := now + 10*365*24*3600*1000 // ten years ahead
	require.NoError(t, admin.Set(ctx, "u", logValue([][]int64{{far, far, now - 5000}}), 0).Err())
	for _, d := range []time.Duration{0, time.Hour, 24 * time.Hour} {
		c.at(d)
		r, err := store.Take(ctx, "u", rule, 1)
		require.NoError(t, err)
		t.Logf("at +%v: allowed=%v remaining=%d retry=%v reset=%v", d, r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter)
		assert.True(t, r.Allowed, "at +%v: a rule of 3/s holds the key off for %v", d, r.RetryAfter)
	}
	ttl, _ := admin.PTTL(ctx, "u").Result()
	t.Logf("PTTL after: %v", ttl)
}

// RT2: with BlockFor and/or MinInterval, a log value shorter than the
// suffix whose length minus the suffix is -n (the log's state_size is -1)
// passes the suffix test, and the script fails on unpack at offset <= 0.
func TestZZLogShortValueWithSuffixErrors(t *testing.T) {
	c := newClock()
	store, admin, _ := newStore(t, c)
	ctx := context.Background()
	cases := []struct {
		name  string
		n     int
		block bool
		gap   bool
		size  int
	}{
		{"1 limit, block, 5 bytes", 1, true, false, 5},
		{"1 limit, gap, 5 bytes", 1, false, true, 5},
		{"1 limit, both, 11 bytes", 1, true, true, 11},
		{"2 limits, block, 4 bytes", 2, true, false, 4},
		{"2 limits, both, 10 bytes", 2, true, true, 10},
		{"4 limits, block, 2 bytes", 4, true, false, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rules := make([]Rule, tc.n)
			for i := range rules {
				rules[i] = Rule{Algorithm: SlidingLog, Limit: 3, Window: time.Duration(i+1) * time.Second}
			}
			if tc.block {
				rules[0].BlockFor = time.Minute
			}
			if tc.gap {
				rules[0].MinInterval = time.Millisecond
			}
			key := "short:" + tc.name
			require.NoError(t, admin.Set(ctx, key, strings.Repeat("\x00", tc.size), 0).Err())
			results := make([]Result, tc.n)
			_, err := store.TakeAll(ctx, key, rules, 1, results)
			assert.NoError(t, err, "a foreign value of %d bytes", tc.size)
			_, err = store.TakeAll(ctx, key, rules, 1, results)
			assert.NoError(t, err, "again")
			ttl, _ := admin.PTTL(ctx, key).Result()
			t.Logf("PTTL after: %v", ttl)
		})
	}
}

// RT2b: the same short value under a batch script: its Lua error aborts
// the whole batch, so calls on other, healthy keys that share the batch
// fail too.
func TestZZLogShortValueFailsItsBatch(t *testing.T) {
	store, admin, _ := newStore(t, nil)
	ctx := context.Background()
	rule := Rule{Algorithm: SlidingLog, Limit: 1000, Window: time.Second, BlockFor: time.Minute}
	require.NoError(t, admin.Set(ctx, "bad", "\x00\x00\x00\x00\x00", 0).Err())
	var mu sync.Mutex
	healthyErrs, healthyOK := 0, 0
	var sample error
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				key := "good" + strconv.Itoa(g)
				if g%4 == 0 && i%2 == 0 {
					key = "bad"
				}
				_, err := store.Take(ctx, key, rule, 1)
				if key != "bad" {
					mu.Lock()
					if err != nil {
						healthyErrs++
						sample = err
					} else {
						healthyOK++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("healthy keys: %d ok, %d failed (%v)", healthyOK, healthyErrs, sample)
	assert.Zero(t, healthyErrs, "healthy keys failed because a foreign value shared their batch")
}

// RT: batch script vs single script, deterministic: the same random
// sequence of calls (takes, up-to takes, refunds of earlier takes,
// penalties, rewards; several limits, BlockFor/MinInterval), on a few keys,
// run as batches of several calls (many on one key) and one by one, must
// give the same answers byte for byte and leave the same values.
func TestZZLogBatchMatchesSingle(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	ctx := context.Background()
	for seed := range zzBatchSeeds() {
		rng := rand.New(rand.NewPCG(uint64(seed), 77))
		n := 1 + rng.IntN(4)
		ws := []time.Duration{time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, time.Second, time.Hour, 200 * 365 * 24 * time.Hour}
		rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
		rules := make([]Rule, n)
		most := int64(0)
		for i := range rules {
			rules[i] = Rule{Algorithm: SlidingLog, Limit: int64(1 + rng.IntN(20)), Window: ws[i]}
			most = max(most, rules[i].Limit)
		}
		switch seed % 4 {
		case 1:
			rules[0].BlockFor = 30 * time.Millisecond
		case 2:
			rules[0].MinInterval = 3 * time.Millisecond
		case 3:
			rules[0].BlockFor, rules[0].MinInterval = 100*time.Millisecond, 2*time.Millisecond
		}
		c := newClock()
		store := New(client, WithClock(c.now), WithoutPipelining())
		b := newBatcher(client, &pipelineStats{}, false)
		type took struct {
			key  string
			cost int64
			res  []Result
		}
		var held []took
		resets := 0
		now := time.Duration(0)
		for round := range 150 {
			size := 1 + rng.IntN(12)
			var batched, single []*batchedCall
			var descs []string
			var pending []took
			for range size {
				if rng.IntN(3) == 0 {
					now += time.Duration(rng.Int64N(40)) * time.Millisecond
				}
				if rng.IntN(50) == 0 {
					now += time.Duration(rng.Int64N(1<<34)) * time.Millisecond
				}
				c.at(now)
				key := "k" + strconv.Itoa(rng.IntN(3))
				var flags byte
				var counted []Result
				cost := rng.Int64N(most + 3)
				desc := ""
				switch x := rng.IntN(10); {
				case x == 0 && len(held) > 0:
					j := rng.IntN(len(held))
					key, cost, counted = held[j].key, held[j].cost, held[j].res
					if rng.IntN(3) == 0 {
						cost = 1 + rng.Int64N(most+2)
					}
					held = append(held[:j], held[j+1:]...)
					flags, desc = argRefund, "refund"
				case x == 1:
					flags, desc = argRefund|argPenalty, "penalty"
				case x == 2:
					flags, desc = argRefund|argReward, "reward"
				case x == 3:
					flags, desc = argUpTo, "upto"
				default:
					desc = "take"
				}
				var buf [argHeadSize + MaxRules*argRuleSize + 2*argBlockSize]byte
				arg, err := store.pack(&buf, rules, cost, flags, counted)
				require.NoError(t, err)
				descs = append(descs, fmt.Sprintf("%s %s(%d)@%v", key, desc, cost, now))
				batched = append(batched, &batchedCall{ctx: ctx, alg: SlidingLog, key: fmt.Sprintf("b%d:%s", seed, key), arg: string(arg)})
				single = append(single, &batchedCall{ctx: ctx, alg: SlidingLog, key: fmt.Sprintf("s%d:%s", seed, key), arg: string(arg)})
				if flags == 0 || flags == argUpTo {
					pending = append(pending, took{key: key, cost: cost}) // results filled below
				}
			}
			_ = resets
			// Keys must not expire by Redis's own (real) clock between the
			// rounds, as the two copies were written at different moments.
			var before []string
			for _, key := range []string{"k0", "k1", "k2"} {
				vb, _ := client.Get(ctx, fmt.Sprintf("b%d:%s", seed, key)).Result()
				vs, _ := client.Get(ctx, fmt.Sprintf("s%d:%s", seed, key)).Result()
				before = append(before, fmt.Sprintf("%s: b %x s %x", key, vb, vs))
			}
			b.exec(ctx, batched)
			for _, call := range single {
				call.cmd = runScript(ctx, client, SlidingLog, call.key, call.arg)
			}
			for i, call := range single {
				want, werr := call.cmd.Result()
				got, gerr := batched[i].cmd.Result()
				require.Equal(t, werr, gerr, "seed %d round %d call %d %s", seed, round, i, descs[i])
				require.Equal(t, []byte(want), []byte(got), "seed %d round %d call %d %s\nbatch: %v\nbefore: %v", seed, round, i, descs[i], descs, before)
			}
			// Fill in the results of the takes of this round for later refunds.
			k := len(pending) - 1
			for i := len(single) - 1; i >= 0; i-- {
				if !strings.Contains(descs[i], " take(") && !strings.Contains(descs[i], " upto(") {
					continue
				}
				ans, _ := single[i].cmd.Result()
				res := make([]Result, n)
				if strings.Contains(descs[i], " upto(") {
					ans = ans[:len(ans)-resGrantSize]
				}
				ok, err := decodeResults(ans, rules, res)
				if err == nil && ok {
					pending[k].res = res
					held = append(held, pending[k])
				}
				k--
			}
			for _, key := range []string{"k0", "k1", "k2"} {
				// Nothing expires by Redis's own (real) clock from here to
				// the next round; a key that one copy lost a moment before
				// the other (short PX) is dropped from both.
				client.PExpire(ctx, fmt.Sprintf("b%d:%s", seed, key), time.Hour)
				client.PExpire(ctx, fmt.Sprintf("s%d:%s", seed, key), time.Hour)
				vb, _ := client.Get(ctx, fmt.Sprintf("b%d:%s", seed, key)).Result()
				vs, _ := client.Get(ctx, fmt.Sprintf("s%d:%s", seed, key)).Result()
				if (vb == "") != (vs == "") {
					// One may have expired by Redis's real clock a moment
					// before the other (short PX).
					client.Del(ctx, fmt.Sprintf("b%d:%s", seed, key), fmt.Sprintf("s%d:%s", seed, key))
					resets++
					continue
				}
				vs, vb = zzClampSuffix(vs, rules, ms(now)), zzClampSuffix(vb, rules, ms(now))
				require.Equal(t, []byte(vs), []byte(vb), "seed %d round %d key %s value", seed, round, key)
			}
		}
	}
}

// zzClampSuffix zeroes the block/gap ends of v that have passed at now:
// they mean nothing, and a key that expired by Redis's real clock between
// two rounds has them zero.
func zzClampSuffix(v string, rules []Rule, now int64) string {
	suffix := 0
	if rules[0].BlockFor > 0 {
		suffix += 6
	}
	if rules[0].MinInterval > 0 {
		suffix += 6
	}
	if v == "" || suffix == 0 || len(v) < suffix {
		return v
	}
	b := []byte(v)
	for p := len(b) - suffix; p < len(b); p += 6 {
		if getUint(string(b[p:p+6])) <= now {
			copy(b[p:p+6], make([]byte, 6))
		}
	}
	return string(b)
}

func zzBatchSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("ZZ_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 30
}
