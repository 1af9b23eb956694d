package headers

import "strconv"

// decimalsBelow bounds the numbers whose decimal forms are kept in a
// table: remaining counts and reset seconds are below it for nearly every
// limit an application sets (a Max up to 9999, a window up to 2h46m), so
// their fields are set from the table without being formatted.
const decimalsBelow = 10_000

// decimals holds the decimal form of each n below decimalsBelow in its own
// four bytes, from 4n on (digits first, unused bytes after).
var decimals = func() *[4 * decimalsBelow]byte {
	var t [4 * decimalsBelow]byte
	for n := range decimalsBelow {
		strconv.AppendInt(t[4*n:4*n], int64(n), 10)
	}
	return &t
}()

// Decimal returns n in decimal from a table shared by every caller, with
// ok false when n is negative or 10,000 or more. The slice must not be
// changed; its capacity ends with it, so an append copies.
func Decimal(n int64) (text []byte, ok bool) {
	if n < 0 || n >= decimalsBelow {
		return nil, false
	}
	size := int64(1)
	switch {
	case n >= 1000:
		size = 4
	case n >= 100:
		size = 3
	case n >= 10:
		size = 2
	}
	return decimals[4*n : 4*n+size : 4*n+size], true
}

// appendDecimal appends n in decimal to p.
func appendDecimal(p []byte, n int64) []byte {
	if text, ok := Decimal(n); ok {
		return append(p, text...)
	}
	return strconv.AppendInt(p, n, 10)
}
