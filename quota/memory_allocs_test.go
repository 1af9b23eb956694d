package quota

import (
	"context"
	"testing"
	"time"
)

// Once a key is tracked, no call of a Limiter in memory allocates: the
// decider interface takes the limits and Results by value, and a key with
// its window is put together on the stack (sync.Pool is not involved, so
// the race detector changes nothing here).
func TestMemoryCallsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	for _, vary := range []bool{false, true} {
		l, err := New(Config{Limits: []Limit{{Max: 1 << 30, Expiration: time.Hour}}, VaryMax: true, VaryExpiration: vary})
		if err != nil {
			t.Fatal(err)
		}
		var res Result
		calls := map[string]func(){
			"TakeInto": func() { _ = l.TakeInto(ctx, "client", 1, &res) },
			"Take":     func() { res, _ = l.Take(ctx, "client", 1) },
			"TakeWith": func() { res, _ = l.TakeWith(ctx, "client", 1, Limit{Max: 1 << 29}) },
			"TakeUpTo": func() { _, res, _ = l.TakeUpTo(ctx, "client", 2) },
			"Refund": func() {
				_ = l.TakeInto(ctx, "client", 1, &res)
				res, _ = l.Refund(ctx, "client", 1, &res)
			},
			"Penalize": func() { res, _ = l.Penalize(ctx, "client", 1) },
			"Reward":   func() { res, _ = l.Reward(ctx, "client", 1) },
		}
		if vary {
			calls["TakeWith"] = func() { res, _ = l.TakeWith(ctx, "client", 1, Limit{Expiration: 2 * time.Hour}) }
		}
		for name, call := range calls {
			call()
			if n := testing.AllocsPerRun(100, call); n != 0 {
				t.Errorf("%s (VaryExpiration %v): %v allocations", name, vary, n)
			}
		}
	}
}

// BenchmarkMemoryTake measures the in-memory hot paths on one tracked
// key: TakeInto (the middlewares' plain take), Take, TakeWith (MaxFunc;
// and ExpirationFunc, whose keys carry their window), TakeUpTo and a take
// with its Refund. Each must allocate nothing.
func BenchmarkMemoryTake(b *testing.B) {
	ctx := context.Background()
	for _, alg := range []Algorithm{FixedWindow, TokenBucket} {
		l, err := New(Config{Algorithm: alg, Limits: []Limit{{Max: 1 << 30, Expiration: time.Hour}}, VaryMax: true})
		if err != nil {
			b.Fatal(err)
		}
		windowed, err := New(Config{Algorithm: alg, Limits: []Limit{{Max: 1 << 30, Expiration: time.Hour}}, VaryExpiration: true})
		if err != nil {
			b.Fatal(err)
		}
		var res Result
		_ = l.TakeInto(ctx, "client", 1, &res)
		b.Run(alg.String()+"/TakeInto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = l.TakeInto(ctx, "client", 1, &res)
			}
		})
		// The same take through the decider interface, which TakeInto
		// spares itself in memory (see there).
		b.Run(alg.String()+"/TakeIntoViaDecider", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, _ = l.decider.takeKey(ctx, "client", l.base, 1)
				l.finish(&res, &l.base)
			}
		})
		b.Run(alg.String()+"/Take", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, _ = l.Take(ctx, "client", 1)
			}
		})
		b.Run(alg.String()+"/TakeWith", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, _ = l.TakeWith(ctx, "client", 1, Limit{Max: 1 << 29})
			}
		})
		b.Run(alg.String()+"/TakeWithExpiration", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, _ = windowed.TakeWith(ctx, "client", 1, Limit{Expiration: 2 * time.Hour})
			}
		})
		b.Run(alg.String()+"/TakeUpTo", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, res, _ = l.TakeUpTo(ctx, "client", 2)
			}
		})
		b.Run(alg.String()+"/TakeRefund", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = l.TakeInto(ctx, "client", 1, &res)
				res, _ = l.Refund(ctx, "client", 1, &res)
			}
		})
	}
}
