package main

import (
	"reflect"
	"strconv"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// keyHeader is the request header every limiter of this program keys
// requests by, instead of the client IP.
const keyHeader = "X-Key"

// headerKey is the KeyGenerator of every Fiber variant.
func headerKey(c *fiber.Ctx) string { return c.Get(keyHeader) }

// newApp returns the handler of a Fiber app with mw in front of a route
// that answers 200, or of the same app without mw when mw is nil: the
// baseline. Requests go to it through app.Handler(), with no network.
func newApp(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Handler()
}

// request is a request context reused for every request of one caller, as
// fasthttp's server reuses one per connection.
type request struct {
	ctx *fasthttp.RequestCtx
	// stamp is the context's unexported time field, which fasthttp's server
	// sets to time.Now() before calling the handler and RequestCtx.Time()
	// returns; nil if this fasthttp has no such field.
	stamp *time.Time
}

// newRequest returns a GET / request context.
func newRequest() *request {
	ctx := new(fasthttp.RequestCtx)
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	ctx.Request.SetRequestURI("/")
	r := &request{ctx: ctx}
	if f := reflect.ValueOf(ctx).Elem().FieldByName("time"); f.IsValid() && f.Type() == reflect.TypeOf(time.Time{}) {
		r.stamp = (*time.Time)(unsafe.Pointer(f.UnsafeAddr()))
	}
	return r
}

// serve sends one request for key through h as fasthttp's server would:
// a fresh response, the time stamped, then the handler. It returns the
// response status. Every variant, the baseline too, pays the same for it.
func (r *request) serve(h fasthttp.RequestHandler, key []byte) int {
	r.ctx.Request.Header.SetBytesV(keyHeader, key)
	r.ctx.Response.Reset()
	if r.stamp != nil {
		*r.stamp = time.Now()
	}
	h(r.ctx)
	return r.ctx.Response.StatusCode()
}

// byteKeys returns prefix + "client-<i>" for i < n, then prefix + "hot" at
// index n.
func byteKeys(prefix string, n int) [][]byte {
	keys := make([][]byte, n+1)
	for i := range n {
		keys[i] = []byte(prefix + "client-" + strconv.Itoa(i))
	}
	keys[n] = []byte(prefix + "hot")
	return keys
}

// stringKeys is byteKeys as strings.
func stringKeys(prefix string, n int) []string {
	keys := make([]string, n+1)
	for i := range n {
		keys[i] = prefix + "client-" + strconv.Itoa(i)
	}
	keys[n] = prefix + "hot"
	return keys
}
