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
		assert.Equal(t, strconv.FormatInt(n, 10), string(appendDecimal(nil, n)), "n=%d", n)
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
