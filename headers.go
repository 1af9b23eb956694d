package limiter

import (
	rlheaders "github.com/fiberlimit/limiter/internal/headers"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// HeaderMode chooses which rate-limit headers a response carries.
// Retry-After is sent with every rejection that can succeed later, in every
// mode.
type HeaderMode = rlheaders.Mode

const (
	// HeadersXRateLimit sends X-Ratelimit-Limit, X-Ratelimit-Remaining and
	// X-Ratelimit-Reset (so spelled on the wire), as Fiber's limiter does.
	// The default.
	HeadersXRateLimit = rlheaders.XRateLimit
	// HeadersIETF sends RateLimit-Policy and RateLimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-10, for example
	// `RateLimit-Policy: "default";q=100;w=60` and
	// `RateLimit: "default";r=42;t=17`.
	HeadersIETF = rlheaders.IETF
	// HeadersBoth sends both sets.
	HeadersBoth = rlheaders.Both
	// HeadersNone sends no rate-limit headers (Retry-After still goes with
	// a rejection). DisableHeaders: true means the same.
	HeadersNone = rlheaders.None
)

// responseFields are a Fiber response's header fields, as package headers
// reads them.
type responseFields fasthttp.ResponseHeader

func (f *responseFields) Peek(name []byte) []byte {
	return (*fasthttp.ResponseHeader)(f).PeekBytes(name)
}

// fieldsOf returns c's response header fields.
func fieldsOf(c *fiber.Ctx) rlheaders.Fields {
	return (*responseFields)(&c.Response().Header)
}

// rejectedBehind is the request's user value that says a limiter behind
// this one (later in the chain) rejected the request: with 429, or with
// FailClosed's 503. A limiter in front then leaves that limiter's
// X-RateLimit fields and Retry-After as they are (see
// rlheaders.Writer.WriteAdmitted).
type rejectedBehind struct{}
