// Package fasthttpfields sets a decision's header fields on a fasthttp
// response, for the adapters built on fasthttp (Fiber v2 and v3).
package fasthttpfields

import (
	"strconv"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/valyala/fasthttp"
)

// Set sets the fields of out on h, by SetCanonical, which does not
// normalize, under the names in the form fasthttp normalizes them to, so
// that they are where Fiber's header getters and Header.Del look for them;
// then it releases out.
func Set(h *fasthttp.ResponseHeader, out *headers.Out) {
	for i := range out.Len() {
		name, value := out.Field(i)
		h.SetCanonical(name, value)
	}
	headers.ReleaseOut(out)
}

// SetPlain sets the three X-RateLimit fields of h to limit, remaining and
// reset (see headers.Writer.Plain), formatted in a pooled buffer: one on
// the stack would escape through SetCanonical on newer fasthttp.
func SetPlain(h *fasthttp.ResponseHeader, limit, remaining, reset int64) {
	out := headers.AcquireOut()
	h.SetCanonical(headers.NameLimit, strconv.AppendInt(out.Room(), limit, 10))
	h.SetCanonical(headers.NameRemaining, strconv.AppendInt(out.Room(), remaining, 10))
	h.SetCanonical(headers.NameReset, strconv.AppendInt(out.Room(), reset, 10))
	headers.ReleaseOut(out)
}
