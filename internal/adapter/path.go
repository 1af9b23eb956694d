package adapter

import (
	"context"
	"time"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
)

// Path is the part of a middleware's request path that knows no
// framework: the take, the adjustment after the handler, and the event for
// OnDecision. Settings.Build makes it; an adapter drives it from its own
// request type (see package fiberpath for both Fiber versions).
type Path struct {
	Engine  *quota.Limiter
	Headers *headers.Writer
	// Memory: the engine keeps state in this process. A take then runs
	// under the request's own context where the framework has one that
	// carries the request's start time (fasthttp's), sparing a clock read.
	Memory     bool
	DryRun     bool
	SkipFailed bool // SkipFailedRequests
	SkipOK     bool // SkipSuccessfulRequests
}

// Request is what one request brings to the path.
type Request struct {
	Key  string
	Cost int
	// First is the first limit as MaxFunc and ExpirationFunc set it for
	// this request; zero when neither is set.
	First quota.Limit
	// Idempotent: the adapter has an IdempotencyKey, and ID is its value.
	Idempotent bool
	ID         string
	// Start is when the decision began; set only for OnDecision.
	Start time.Time
}

// Adjusts reports whether an admitted request may be refunded after its
// handler (SkipFailedRequests or SkipSuccessfulRequests): its key and ID
// must then outlive request buffers that the handler may reuse.
func (p *Path) Adjusts() bool { return p.SkipFailed || p.SkipOK }

// Take decides r into res.
func (p *Path) Take(ctx context.Context, r *Request, res *quota.Result) (err error) {
	switch {
	case r.First != (quota.Limit{}):
		*res, err = p.Engine.TakeWith(ctx, r.Key, r.Cost, r.First)
	case r.Idempotent:
		*res, err = p.Engine.TakeIdempotent(ctx, r.Key, r.ID, r.Cost)
	default:
		err = p.Engine.TakeInto(ctx, r.Key, r.Cost, res)
	}
	return err
}

// Finish gives back the cost of r, admitted as res, when its response
// status says so (Skip*Requests), and updates res to the state it leaves.
// A failed refund leaves res as it was: the request was counted.
func (p *Path) Finish(ctx context.Context, r *Request, status int, res *quota.Result) {
	if !res.Allowed() || r.Cost == 0 || !p.Adjusts() {
		return
	}
	if failed := status >= 400; (failed && p.SkipFailed) || (!failed && p.SkipOK) {
		if after, err := p.Engine.RefundIdempotent(ctx, r.Key, r.ID, r.Cost, res); err == nil {
			*res = after
		}
	}
}

// Event describes the decision res of r for OnDecision.
func (p *Path) Event(r *Request, res *quota.Result) quota.DecisionEvent {
	ev := p.Engine.Event(r.Key, r.Cost, res)
	ev.DryRun = p.DryRun
	ev.Latency = time.Since(r.Start)
	return ev
}
