package headers

import (
	"encoding/binary"
	"strconv"
)

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
	size := decimalSize(n)
	return decimals[4*n : 4*n+size : 4*n+size], true
}

// decimalSize is the number of digits of n, 0 to 9999.
func decimalSize(n int64) int64 {
	switch {
	case n >= 1000:
		return 4
	case n >= 100:
		return 3
	case n >= 10:
		return 2
	}
	return 1
}

// AppendDecimal appends n in decimal to p. Below 10^8 (any remaining
// count of a Max below that) it takes the high digits from the table and
// works out the four low ones, rather than formatting the number.
func AppendDecimal(p []byte, n int64) []byte {
	if text, ok := Decimal(n); ok {
		return append(p, text...)
	}
	if n < 0 || n >= decimalsBelow*decimalsBelow {
		return strconv.AppendInt(p, n, 10)
	}
	high, low := n/decimalsBelow, uint32(n%decimalsBelow) // high is 1 to 9999
	size := decimalSize(high)
	var digits [8]byte
	binary.LittleEndian.PutUint32(digits[:4], binary.LittleEndian.Uint32(decimals[4*high:]))
	binary.LittleEndian.PutUint32(digits[size:], '0'+low/1000|('0'+low/100%10)<<8|('0'+low/10%10)<<16|('0'+low%10)<<24)
	return append(p, digits[:size+4]...)
}
