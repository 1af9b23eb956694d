package limiter

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redisengine"
	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/stretchr/testify/require"
)

// BenchmarkRedisLimitsCPU measures the Redis CPU of a decision under one
// limit and under two (a minute and an hour), for each algorithm, on one
// server: the scripts' time from INFO commandstats (usec of EVALSHA) over
// 10,000 decisions at 8 callers on 100,000 keys. Each round measures one
// limit, then two; the figures are medians over 7 rounds:
// one-µs/decision, two-µs/decision, and x-one-limit, the median of the
// rounds' ratios.
//
//	go test -run '^$' -bench RedisLimitsCPU -benchtime 1x .
func BenchmarkRedisLimitsCPU(b *testing.B) {
	const callers, decisions, rounds = 8, 10_000, 7
	srv := redistest.Start(b)
	admin := srv.Client(b)
	ctx := context.Background()
	engine := redisengine.Open(rbClient(srv, callers), nil) // the script calls of a storage/redis Store
	b.Cleanup(func() { require.NoError(b, engine.Conn().Close()) })
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = ":" + strconv.Itoa(i)
	}
	// measure returns the server's µs per decision of n decisions under rules.
	measure := func(b *testing.B, prefix string, rules []redisengine.Rule, n int) float64 {
		decide := func(i int) error {
			var res [2]redisengine.Result
			_, err := engine.TakeAll(ctx, prefix+keys[i%len(keys)], rules, 1, res[:])
			return err
		}
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if _, err := rbDecide(n, callers, decide, func(i int) int { return i }); err != nil {
			b.Fatal(err)
		}
		calls, usec := redistest.CommandStats(b, admin)
		return float64(usec["evalsha"]+usec["eval"]) / float64(calls["evalsha"]+calls["eval"])
	}
	for _, alg := range []redisengine.Algorithm{redisengine.FixedWindow, redisengine.SlidingWindow, redisengine.TokenBucket} {
		b.Run(map[redisengine.Algorithm]string{redisengine.FixedWindow: "fw", redisengine.SlidingWindow: "sw", redisengine.TokenBucket: "tb"}[alg], func(b *testing.B) {
			one := []redisengine.Rule{{Algorithm: alg, Max: rbMax, Expiration: time.Minute}}
			two := []redisengine.Rule{one[0], {Algorithm: alg, Max: 100_000_000, Expiration: time.Hour}}
			var ones, twos, ratios []float64
			for range b.N {
				measure(b, "one", one, 10*callers) // warm: the script loaded, the pool open
				measure(b, "two", two, 10*callers)
				for range rounds {
					o := measure(b, "one", one, decisions)
					t := measure(b, "two", two, decisions)
					ones, twos, ratios = append(ones, o), append(twos, t), append(ratios, t/o)
				}
			}
			b.ReportMetric(median(ones), "one-µs/decision")
			b.ReportMetric(median(twos), "two-µs/decision")
			b.ReportMetric(median(ratios), "x-one-limit")
		})
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
