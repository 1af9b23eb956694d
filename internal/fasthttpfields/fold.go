package fasthttpfields

import (
	"bytes"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/valyala/fasthttp"
)

// Fold gives the fields of h that the limiter w reads or sets (Retry-After,
// and those of w's mode) the names in the form the limiter uses
// (headers.NameLimit, ...), for an app that does not normalize header names
// (Fiber's DisableHeaderNormalizing): there fasthttp matches names byte for
// byte, so a handler's X-RateLimit-Remaining would stand beside the
// limiter's X-Ratelimit-Remaining, as a second value that a client may read
// first. A field of one value (X-RateLimit-*, Retry-After) is left with the
// last value set under any spelling, as setting it under normalized names
// would leave it; the values of a list (the IETF RateLimit and
// RateLimit-Policy) move, in order, after those under the limiter's name.
// The limiter then reads, adds to and overwrites them as it does with
// normalized names. Fields of the other mode are left as they are.
func Fold(h *fasthttp.ResponseHeader, w *headers.Writer) {
	xRateLimit, ietf := w.Sets()
	folded := [...]struct {
		name []byte
		list bool
		on   bool
	}{
		{headers.NameRetryAfter, false, true},
		{headers.NameLimit, false, xRateLimit},
		{headers.NameRemaining, false, xRateLimit},
		{headers.NameReset, false, xRateLimit},
		{headers.NamePolicy, true, ietf},
		{headers.NameRateLimit, true, ietf},
	}
	var moved []foldedField // made rarely: only when another spelling is there
	h.VisitAll(func(key, value []byte) {
		for i, f := range folded {
			if f.on && len(key) == len(f.name) && !bytes.Equal(key, f.name) && bytes.EqualFold(key, f.name) {
				moved = append(moved, foldedField{key: bytes.Clone(key), field: i, value: bytes.Clone(value)})
				return
			}
		}
	})
	if len(moved) == 0 {
		return
	}
	// The last value of each single field, under any spelling, its own
	// included, and the values of each list under the limiter's name, in
	// order: looked up before any is dropped.
	var last [len(folded)][]byte
	var own [len(folded)][][]byte
	h.VisitAll(func(key, value []byte) {
		for i, f := range folded {
			switch {
			case !f.on:
			case f.list && bytes.Equal(key, f.name):
				own[i] = append(own[i], bytes.Clone(value))
			case !f.list && bytes.EqualFold(key, f.name):
				last[i] = bytes.Clone(value)
			}
		}
	})
	// Every field with another spelling there goes, under each spelling,
	// before any value is set again: a deletion may move the header's last
	// field into the place of the one it deletes (fasthttp 1.69 does), so
	// values set in between could end up in any order.
	var touched [len(folded)]bool
	for _, m := range moved {
		h.DelBytes(m.key) // every value under that spelling; each is in moved
		touched[m.field] = true
	}
	for i, f := range folded {
		if touched[i] {
			h.DelBytes(f.name)
		}
	}
	for i, f := range folded {
		switch {
		case !touched[i]:
		case f.list:
			for _, v := range own[i] {
				h.AddBytesKV(f.name, v)
			}
			for _, m := range moved {
				if m.field == i {
					h.AddBytesKV(f.name, m.value)
				}
			}
		default:
			h.SetCanonical(f.name, last[i])
		}
	}
}

// foldedField is a field under another spelling that Fold moves: its name
// as it was, the field it is (an index of Fold's table), and its value.
type foldedField struct {
	key   []byte
	field int
	value []byte
}
