// Package appflag remembers a fact read from an app's config (Fiber's
// App.Config copies a large struct) for each app a middleware serves, so
// that a request reads it without the copy and without an allocation.
package appflag

import (
	"sync"
	"sync/atomic"
)

// Flag is a fact about each app a middleware serves: the last app served
// is one atomic load away, and up to maxApps others one map lookup; any
// more are read from their config on each request. The zero Flag is ready.
type Flag[App any] struct {
	last atomic.Pointer[of[App]]
	apps sync.Map // *App → *of[App]
	n    atomic.Int32
}

// maxApps bounds the apps a Flag remembers beyond the last.
const maxApps = 64

type of[App any] struct {
	app  *App
	flag bool
}

// Of returns the fact for app, which read gives from the app's config.
func (f *Flag[App]) Of(app *App, read func(*App) bool) bool {
	if last := f.last.Load(); last != nil && last.app == app {
		return last.flag
	}
	v, ok := f.apps.Load(app)
	if !ok {
		v = &of[App]{app: app, flag: read(app)}
		if f.n.Load() < maxApps {
			if stored, loaded := f.apps.LoadOrStore(app, v); loaded {
				v = stored
			} else {
				f.n.Add(1)
			}
		}
	}
	now := v.(*of[App])
	f.last.Store(now)
	return now.flag
}
