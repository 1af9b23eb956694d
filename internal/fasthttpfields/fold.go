package fasthttpfields

import (
	"bytes"
	"sync/atomic"

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
// that a client may read first. A field spelled otherwise is renamed (its
// first value kept when the limiter's spelling is not there yet) and its
// other spellings dropped, so that the limiter then reads and overwrites
// it as it does with normalized names.
func Fold(h *fasthttp.ResponseHeader) {
	var other [][]byte // names in another spelling; copies, made rarely
	h.VisitAll(func(key, _ []byte) {
		for _, name := range names {
			if len(key) == len(name) && !bytes.Equal(key, name) && bytes.EqualFold(key, name) {
				other = append(other, bytes.Clone(key))
				return
			}
		}
	})
	for _, key := range other {
		for _, name := range names {
			if !bytes.EqualFold(key, name) {
				continue
			}
			if value := h.PeekBytes(key); value != nil && h.PeekBytes(name) == nil {
				h.SetCanonical(name, bytes.Clone(value))
			}
			h.DelBytes(key)
		}
	}
}

// Normalizing remembers, for the app a middleware last served, whether it
// normalizes header names, so that a request asks the app's config (a
// copy of a large struct in Fiber) only when the app changes.
type Normalizing[App any] struct {
	last atomic.Pointer[normalizingOf[App]]
}

type normalizingOf[App any] struct {
	app *App
	off bool
}

// Off reports whether app does not normalize header names; off reads it
// from the app's config, once per app in a row.
func (n *Normalizing[App]) Off(app *App, off func(*App) bool) bool {
	if last := n.last.Load(); last != nil && last.app == app {
		return last.off
	}
	now := &normalizingOf[App]{app: app, off: off(app)}
	n.last.Store(now)
	return now.off
}
