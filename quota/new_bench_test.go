package quota

import (
	"runtime"
	"testing"

	"github.com/fiberlimit/limiter/internal/redistest"
)

// BenchmarkNew builds a limiter per iteration and drops it, as a handler
// that builds its limiter per request does. On Redis with one identity
// each New meets the limiter before it, which only a collection can tell
// is gone; the floors are the same limiter in memory (no identity to
// claim) and on Redis under one Name (users that share on purpose never
// clash). GCs/op counts collections, forced or not.
func BenchmarkNew(b *testing.B) {
	client := redistest.Start(b).Client(b)
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"memory", Config{Limits: []Limit{PerMinute(5)}}},
		{"redis named", Config{Name: "tenant", Limits: []Limit{PerMinute(5)}, Redis: client}},
		{"redis", Config{Limits: []Limit{PerMinute(5)}, Redis: client}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				if _, err := New(bc.cfg); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.NumGC-before.NumGC)/float64(b.N), "GCs/op")
		})
	}
}
