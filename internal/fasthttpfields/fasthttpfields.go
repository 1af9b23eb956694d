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
// reset (see headers.Writer.Plain). A value w has as text (see
// headers.Writer.Text) is set from there; any other is formatted in a
// pooled buffer: one on the stack would escape through SetCanonical on
// newer fasthttp.
func SetPlain(h *fasthttp.ResponseHeader, w *headers.Writer, limit, remaining, reset int64) {
	var out *headers.Out
	out = setDecimal(h, w, headers.NameLimit, limit, out)
	out = setDecimal(h, w, headers.NameRemaining, remaining, out)
	out = setDecimal(h, w, headers.NameReset, reset, out)
	if out != nil {
		headers.ReleaseOut(out)
	}
}

// setDecimal sets field name of h to n, formatted in out's room when w
// has no text for it (out is acquired then, if nil), and returns out.
func setDecimal(h *fasthttp.ResponseHeader, w *headers.Writer, name []byte, n int64, out *headers.Out) *headers.Out {
	if text, ok := w.Text(n); ok {
		h.SetCanonical(name, text)
		return out
	}
	if out == nil {
		out = headers.AcquireOut()
	}
	h.SetCanonical(name, strconv.AppendInt(out.Room(), n, 10))
	return out
}
