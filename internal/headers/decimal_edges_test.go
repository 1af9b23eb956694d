package headers

import (
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// AppendDecimal reads as strconv formats the number: every high part
// (1 to 9999) with low parts of every padding, the powers of ten and
// their neighbours, negatives and the int64 ends; and it writes nothing
// past what it appends into a slice with room.
func TestAppendDecimal(t *testing.T) {
	ns := []int64{math.MinInt64, math.MinInt64 + 1, -100_000_000, -99_999_999, -10_001, -10_000, -9_999, -1, 0, math.MaxInt64}
	for p := int64(1); p <= 1e18; p *= 10 {
		ns = append(ns, p-1, p, p+1, -p)
	}
	for high := int64(1); high < decimalsBelow; high++ {
		for _, low := range []int64{0, 1, 9, 10, 99, 100, 999, 1000, 4321, 9999} {
			ns = append(ns, high*decimalsBelow+low)
		}
	}
	for _, n := range ns {
		buf := make([]byte, 1, 64)
		buf[0] = 'x'
		full := buf[:cap(buf)]
		for i := 1; i < len(full); i++ {
			full[i] = '#'
		}
		got := AppendDecimal(buf, n)
		want := "x" + strconv.FormatInt(n, 10)
		if string(got) != want {
			require.Equal(t, want, string(got), "n=%d", n)
		}
		for i := len(want); i < len(full); i++ {
			if full[i] != '#' {
				t.Fatalf("n=%d writes past its end at %d", n, i)
			}
		}
	}
}
