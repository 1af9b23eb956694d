package quota

import (
	"context"
	"time"
	"weak"
)

// admitCall reports whether a call may go to the store at now. When the
// breaker is open and its cool-down has passed, it starts a probe on a
// goroutine of its own and refuses the call: no request waits on a store
// that may still be down. Under FailError every call goes to the store.
func (g *guardedStore) admitCall(now int64) bool {
	if g.policy == FailError {
		return true
	}
	ok, probe := g.breaker.allow(now)
	if probe {
		go g.probe()
		return false
	}
	return ok
}

// probe asks the store whether it serves decisions again (for Redis, a
// script call that writes: a server that answers PING but refuses or holds
// writes is still out of service), and closes the breaker or keeps it open
// for another cool-down. Its caller holds the breaker's probe. The probe
// ends when g's life does.
func (g *guardedStore) probe() {
	_, _ = call(context.Background(), g, "", "probe", true, func(ctx context.Context, _ string) (struct{}, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(g.life, cancel)()
		return struct{}{}, g.store.probe(ctx)
	})
}

// armProbe makes sure a probe runs one cool-down from now even if no
// request comes to start it, so that an idle replica finds the store back
// by itself: a timer, no goroutine while it waits, and one at most per
// store. The timer holds the store weakly, and starts nothing once the
// store's life has ended: a limiter dropped while its breaker is open is
// not kept probing.
func (g *guardedStore) armProbe() {
	if !g.probeArmed.CompareAndSwap(false, true) {
		return
	}
	store := weak.Make(g)
	time.AfterFunc(time.Duration(g.breaker.cooldown)*time.Millisecond, func() {
		g := store.Value()
		if g == nil || g.life.Err() != nil {
			return
		}
		g.probeArmed.Store(false)
		if ok, probe := g.breaker.allow(g.now()); probe {
			g.probe()
		} else if !ok {
			g.armProbe() // not yet due by the limiter's clock, or a probe is out
		}
	})
}
