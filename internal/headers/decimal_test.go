package headers

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every number the table holds reads as strconv formats it, and an append
// to one never writes into the next.
func TestDecimalIsStrconv(t *testing.T) {
	for n := range int64(decimalsBelow) {
		text, ok := Decimal(n)
		require.True(t, ok, "n=%d", n)
		require.Equal(t, strconv.FormatInt(n, 10), string(text), "n=%d", n)
		require.Equal(t, len(text), cap(text), "n=%d", n)
	}
	seven, _ := Decimal(7)
	_ = append(seven, '9')
	eight, _ := Decimal(8)
	assert.Equal(t, "8", string(eight))
	seven, _ = Decimal(7)
	assert.Equal(t, "7", string(seven))
}

func TestDecimalOutsideTheTable(t *testing.T) {
	for _, n := range []int64{-1, -10_000, decimalsBelow, 1 << 40} {
		_, ok := Decimal(n)
		assert.False(t, ok, "n=%d", n)
		assert.Equal(t, strconv.FormatInt(n, 10), string(AppendDecimal(nil, n)), "n=%d", n)
	}
}

// Numbers from the table's end to 10^8, copied from it in two parts,
// read as strconv formats them: every zero padding of the low part, the
// edges, and a sweep between; and so do the numbers past them.
func TestAppendDecimalInTwoParts(t *testing.T) {
	ns := []int64{decimalsBelow, decimalsBelow + 1, 10_009, 10_099, 10_999, 99_999_999, 100_000_000, 100_000_001, 1<<26 - 1, 1<<31 - 1, 1<<32 - 1}
	for n := int64(decimalsBelow); n < 100_000_000; n += 9_973 {
		ns = append(ns, n)
	}
	for low := int64(0); low < decimalsBelow; low++ {
		ns = append(ns, 4_321*decimalsBelow+low)
	}
	for _, n := range ns {
		require.Equal(t, "x"+strconv.FormatInt(n, 10), string(AppendDecimal([]byte("x"), n)), "n=%d", n)
	}
}

// A Writer has text for the table's numbers and for the quotas it was
// built with, and for nothing else.
func TestWriterTextOfQuotas(t *testing.T) {
	w, err := New(Config{Quotas: []int{1_000_000_000, 50, 1_000_000_000, 4_294_967_295}})
	require.NoError(t, err)
	tests := []struct {
		n  int64
		ok bool
	}{
		{0, true}, {50, true}, {9999, true},
		{1_000_000_000, true}, {4_294_967_295, true},
		{10_000, false}, {999_999_999, false}, {-1, false},
	}
	for _, tt := range tests {
		text, ok := w.Text(tt.n)
		require.Equal(t, tt.ok, ok, "n=%d", tt.n)
		if ok {
			assert.Equal(t, strconv.FormatInt(tt.n, 10), string(text), "n=%d", tt.n)
			assert.Equal(t, len(text), cap(text), "n=%d", tt.n)
		}
	}
	assert.Len(t, w.quotas, 2, "the table's numbers and repeats are not kept twice")
}
