// Package fiberpath is the request path of the Fiber v2 and v3
// middlewares, written once over the context type C of either version:
// both sit on fasthttp, so everything but a handful of calls (Framework)
// works on the *fasthttp.RequestCtx beneath. The take, the report, the
// rejection, the adjustment after the handler and the headers written
// after it are the same code for both.
package fiberpath

import (
	"context"
	"fmt"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/internal/fasthttpfields"
	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
	"github.com/valyala/fasthttp"
)

// Framework is what the path needs of a Fiber version's context C, each a
// method expression of C where one fits (for instance (*fiber.Ctx).Next).
type Framework[C any] struct {
	// RequestCtx is the fasthttp request beneath c.
	RequestCtx func(c C) *fasthttp.RequestCtx
	// AppContext is the application's context of c, which a store call
	// runs under (v2's UserContext, v3's Context).
	AppContext func(c C) context.Context
	// Next runs the rest of the chain.
	Next func(c C) error
	// SendStatus answers with status and its text.
	SendStatus func(c C, status int) error
	// ErrorStatus is the status the app's default error handler gives err
	// (a *fiber.Error its code, anything else 500).
	ErrorStatus func(err error) int
	// NamesAsGiven reports whether c's app keeps header names as given
	// (DisableHeaderNormalizing).
	NamesAsGiven func(c C) bool
}

// Handler is the middleware of one limiter: the user's functions of its
// Config, and the path Settings.Build made.
type Handler[C any] struct {
	*adapter.Path
	Framework[C]

	Skip           func(C) bool // Config.Next
	MaxFunc        func(C) int
	ExpirationFunc func(C) time.Duration // Fiber v3 only
	IdempotencyKey func(C) string
	Cost           func(C) int
	KeyGenerator   func(C) string
	LimitReached   func(C) error
	OnDecision     func(C, quota.DecisionEvent)
}

// Serve is the middleware.
func (h *Handler[C]) Serve(c C) error {
	if h.Skip != nil && h.Skip(c) {
		return h.Next(c)
	}
	fast := h.RequestCtx(c)
	r := adapter.Request{Cost: 1}
	if h.MaxFunc != nil {
		// As in Fiber: 0 leaves the request unlimited, below 0 rejects it
		// (a plan that admits nothing; see quota.Limiter.TakeWith).
		if r.First.Max = h.MaxFunc(c); r.First.Max == 0 {
			return h.Next(c)
		}
	}
	if h.ExpirationFunc != nil {
		r.First.Expiration = max(0, h.ExpirationFunc(c))
	}
	if h.Cost != nil {
		if r.Cost = h.Cost(c); r.Cost < 0 {
			return fmt.Errorf("limiter: Cost returned %d for %s %s; it must be >= 0", r.Cost, fast.Method(), fast.Path())
		}
	}
	r.Key = h.KeyGenerator(c)
	if r.Key == "" {
		h.EmptyKey()
	}
	if h.Adjusts() || h.Headers.WithKey() {
		// The key may point into request buffers that the handler below
		// is free to change (proxy.Forward does); the refund and the pk
		// of the headers written after it need it as it is now.
		r.Key = string([]byte(r.Key))
	}
	if h.OnDecision != nil {
		r.Start = time.Now()
	}
	if h.IdempotencyKey != nil && r.First == (quota.Limit{}) {
		r.Idempotent, r.ID = true, h.IdempotencyKey(c)
		if h.Adjusts() {
			r.ID = string([]byte(r.ID)) // for the refund, after the handler
		}
	}
	var res quota.Result
	if err := h.Take(h.context(c, fast), &r, &res); err != nil {
		return h.Failed(r.Key, err)
	}
	if h.Concurrency != nil {
		// A Concurrency limiter's slot goes back however the request
		// ends: rejected, its hook or its handler panicking (the panic
		// goes on), or served.
		defer h.Release(h.context(c, fast), &r)
	}
	if h.OnDecision != nil {
		h.OnDecision(c, h.Event(&r, &res))
	}
	switch res.Source() {
	case quota.SourceFailOpen:
		return h.Next(c)
	case quota.SourceFailClosed:
		if h.DryRun {
			return h.Next(c)
		}
		h.foldNames(c, fast)
		if !h.Headers.Silent() {
			var buf [20]byte
			fast.Response.Header.SetCanonical(headers.NameRetryAfter, headers.FailClosedRetryAfter(buf[:0], fieldsOf(fast), res.RetryAfter()))
		}
		fast.SetUserValue(rejectedBehind{}, true)
		return h.SendStatus(c, fasthttp.StatusServiceUnavailable)
	}
	if !res.Allowed() && !h.DryRun {
		h.foldNames(c, fast)
		out := headers.AcquireOut()
		h.Headers.Write(out, fieldsOf(fast), &res, r.Key, false)
		fasthttpfields.Set(&fast.Response.Header, out)
		fast.SetUserValue(rejectedBehind{}, true)
		return h.LimitReached(c)
	}
	err := h.Next(c)
	if h.Adjusts() {
		status := fast.Response.StatusCode()
		if err != nil {
			status = h.ErrorStatus(err)
		}
		if ferr := h.Finish(h.context(c, fast), &r, status, &res); ferr != nil && err == nil {
			err = ferr
		}
	}
	if h.Headers.Silent() {
		return err
	}
	h.foldNames(c, fast)
	rejected := fast.UserValue(rejectedBehind{}) != nil
	if limit, remaining, reset, ok := h.Headers.Plain(&res); ok && !rejected {
		fasthttpfields.SetPlain(&fast.Response.Header, h.Headers, limit, remaining, reset)
		return err
	}
	out := headers.AcquireOut()
	h.Headers.WriteAdmitted(out, fieldsOf(fast), &res, r.Key, h.DryRun, rejected)
	fasthttpfields.Set(&fast.Response.Header, out)
	return err
}

// context is the context a decision runs under: in memory, fasthttp's
// request, whose start time spares a clock read; a store call, and a
// request that may wait (MaxDelay), under the application's context
// (fasthttp's Done needs a server, which a handler called directly, as
// in tests, lacks).
func (h *Handler[C]) context(c C, fast *fasthttp.RequestCtx) context.Context {
	if h.Memory && h.MaxDelay == 0 {
		return fast
	}
	return h.AppContext(c)
}

// foldNames gives the rate-limit fields of the response the names the
// limiter reads and sets, when the app does not normalize header names
// (see fasthttpfields.Fold); with normalized names it does nothing.
func (h *Handler[C]) foldNames(c C, fast *fasthttp.RequestCtx) {
	if h.NamesAsGiven(c) {
		fasthttpfields.Fold(&fast.Response.Header, h.Headers)
	}
}

// rejectedBehind is the request's user value that says a limiter behind
// this one (later in the chain) rejected the request: with 429, or with
// FailClosed's 503. A limiter in front then leaves that limiter's fields
// and Retry-After as they are (see headers.Writer.WriteAdmitted).
type rejectedBehind struct{}

// responseFields are a response's header fields, as package headers reads
// them.
type responseFields fasthttp.ResponseHeader

func (f *responseFields) Peek(name []byte) []byte {
	return (*fasthttp.ResponseHeader)(f).PeekBytes(name)
}

// fieldsOf returns the response header fields of fast.
func fieldsOf(fast *fasthttp.RequestCtx) headers.Fields {
	return (*responseFields)(&fast.Response.Header)
}
