package redis

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
)

// BenchmarkLoneCaller shows what pipelining costs a caller that has nothing
// to share a write with: one goroutine making Takes one after another, with
// and without pipelining, in turn over 9 rounds of 3,000 decisions each on
// fresh clients. It reports the median latency of each and the median of
// the per-round ratios (pipelined/unpipelined; the target is at most 1.10):
//
//	go test -run '^$' -bench BenchmarkLoneCaller -benchtime 1x ./storage/redis/
func BenchmarkLoneCaller(b *testing.B) {
	const rounds, decisions = 9, 3000
	srv := redistest.Start(b)
	rule := Rule{Algorithm: FixedWindow, Max: 1 << 30, Expiration: time.Minute}
	measure := func(opts ...Option) time.Duration {
		client := srv.Client(b)
		store := New(client, opts...).engine
		ctx := context.Background()
		for i := range 200 { // warm: connection, script cache
			if _, err := store.Take(ctx, "warm-"+strconv.Itoa(i), rule, 1); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		for i := range decisions {
			if _, err := store.Take(ctx, "lone-"+strconv.Itoa(i%100), rule, 1); err != nil {
				b.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		_ = client.Close()
		return elapsed / decisions
	}
	for range b.N {
		var piped, plain, ratios []float64
		for round := range rounds {
			var p, u time.Duration
			if round%2 == 0 { // alternate which goes first
				p, u = measure(), measure(WithoutPipelining())
			} else {
				u, p = measure(WithoutPipelining()), measure()
			}
			piped = append(piped, float64(p.Nanoseconds()))
			plain = append(plain, float64(u.Nanoseconds()))
			ratios = append(ratios, float64(p)/float64(u))
		}
		b.ReportMetric(median(piped), "pipelined-ns/decision")
		b.ReportMetric(median(plain), "unpipelined-ns/decision")
		b.ReportMetric(median(ratios), "pipelined/unpipelined")
	}
}

// median returns the middle value of xs (sorting it).
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
