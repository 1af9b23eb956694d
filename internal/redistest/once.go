package redistest

import (
	"flag"
	"strconv"
	"strings"
	"testing"
)

// MeasureOnce skips a benchmark that repeats a whole measurement per
// iteration (a Redis run of its own, say) when b.N is, or is going to be
// (-benchtime=Nx), too large for that to end in reasonable time: above 100.
func MeasureOnce(b *testing.B) {
	n := b.N
	if f := flag.Lookup("test.benchtime"); f != nil {
		if x, ok := strings.CutSuffix(f.Value.String(), "x"); ok {
			if v, err := strconv.Atoi(x); err == nil {
				n = max(n, v)
			}
		}
	}
	if n > 100 {
		b.Skipf("each iteration is a whole measurement; b.N=%d would take too long: use -benchtime=1x", n)
	}
}
