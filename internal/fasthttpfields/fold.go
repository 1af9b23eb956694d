package fasthttpfields

import (
	"bytes"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/valyala/fasthttp"
)

// names are the fields the limiter reads and sets, in the form fasthttp
// normalizes names to.
var names = [...][]byte{
	headers.NameLimit, headers.NameRemaining, headers.NameReset,
	headers.NamePolicy, headers.NameRateLimit, headers.NameRetryAfter,
}

// Fold gives every field of h that the limiter reads or sets the name in
// the form the limiter uses (headers.NameLimit, ...), for an app that does
// not normalize header names (Fiber's DisableHeaderNormalizing): there
// fasthttp matches names byte for byte, so a handler's X-RateLimit-Remaining
// would stand beside the limiter's X-Ratelimit-Remaining, as a second value
// that a client may read first. Every value under another spelling moves,
// in order, under the limiter's, after those already there, so that the
// limiter then reads, adds to and overwrites them as it does with
// normalized names.
func Fold(h *fasthttp.ResponseHeader) {
	var moved []foldedField // made rarely: only another spelling is there
	h.VisitAll(func(key, value []byte) {
		for _, name := range names {
			if len(key) == len(name) && !bytes.Equal(key, name) && bytes.EqualFold(key, name) {
				moved = append(moved, foldedField{key: bytes.Clone(key), name: name, value: bytes.Clone(value)})
				return
			}
		}
	})
	for _, f := range moved {
		h.DelBytes(f.key) // every value under that spelling; each is in moved
	}
	for _, f := range moved {
		h.AddBytesKV(f.name, f.value)
	}
}

// foldedField is a field Fold moves: its name as it was, as it becomes, and
// its value.
type foldedField struct {
	key, name, value []byte
}
