package main

import (
	"time"

	limiterv3 "github.com/fiberlimit/limiter/fiberv3"
	fiberv3 "github.com/gofiber/fiber/v3"
	fiberv3limiter "github.com/gofiber/fiber/v3/middleware/limiter"
	"github.com/valyala/fasthttp"
)

// Names of the Fiber v3 variants of figure 1: their added cost is over
// the bare Fiber v3 app's, as the v2 variants' is over the bare v2 app's.
const (
	vV3Baseline   = "v3 baseline (no limiter)"
	vV3OursFixed  = "v3 ours-fixed"
	vV3FiberFixed = "v3 fiber-fixed"
)

// newV3App returns the handler of a Fiber v3 app with mw in front of a
// route that answers 200, or of the same app without mw when mw is nil.
func newV3App(mw fiberv3.Handler) fasthttp.RequestHandler {
	app := fiberv3.New()
	if mw != nil {
		app.Use(mw)
	}
	app.Get("/", func(c fiberv3.Ctx) error { return c.SendStatus(fiberv3.StatusOK) })
	return app.Handler()
}

func v3HeaderKey(c fiberv3.Ctx) string { return c.Get(keyHeader) }

// v3Variants are the Fiber v3 in-memory variants, each an app for a limit
// of max per minute.
func v3Variants() []memVariant {
	return []memVariant{
		{name: vV3Baseline, base: vV3Baseline, app: func(int) fasthttp.RequestHandler { return newV3App(nil) }},
		{name: vV3OursFixed, base: vV3Baseline, app: func(max int) fasthttp.RequestHandler {
			return newV3App(limiterv3.New(limiterv3.Config{Max: max, Expiration: time.Minute, KeyGenerator: v3HeaderKey}))
		}},
		{name: vV3FiberFixed, base: vV3Baseline, app: func(max int) fasthttp.RequestHandler {
			return newV3App(fiberv3limiter.New(fiberv3limiter.Config{Max: max, Expiration: time.Minute, KeyGenerator: v3HeaderKey}))
		}},
	}
}
