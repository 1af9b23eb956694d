package adapter

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
)

// Path is the part of a middleware's request path that knows no
// framework: the take, the adjustment after the handler, and the event for
// OnDecision. Settings.Build makes it; an adapter drives it from its own
// request type (see package fiberpath for both Fiber versions).
type Path struct {
	Engine *quota.Limiter
	// Concurrency, for a Concurrency limiter, replaces Engine: a request
	// holds one of its key's slots while its handler runs (Take, Release).
	Concurrency *quota.Concurrency
	Headers     *headers.Writer
	// Memory: the engine keeps state in this process. A take then runs
	// under the request's own context where the framework has one that
	// carries the request's start time (fasthttp's), sparing a clock read.
	Memory     bool
	DryRun     bool
	SkipFailed bool // SkipFailedRequests
	SkipOK     bool // SkipSuccessfulRequests
	// FailError: the engine's FailurePolicy is quota.FailError, so a
	// failed refund after the handler is the request's error too.
	FailError bool
	// ShowKeys: errors name the key as it is (DisableValueRedaction);
	// otherwise as "[redacted]".
	ShowKeys bool
	// MaxDelay: a request may wait this long for its turn (Reserve).
	MaxDelay time.Duration

	emptyKey sync.Once
}

// EmptyKey warns, the first time a request's key is "", that every such
// request is counted under that one key: a KeyGenerator that reads a
// header or a parameter a client may leave out lumps those clients
// together (as Fiber's limiter does, silently).
func (p *Path) EmptyKey() {
	p.emptyKey.Do(func() {
		log.Print("limiter: KeyGenerator returned an empty key; every request without a key is counted under that one key (logged once per limiter)")
	})
}

// redacted stands for a key in an error unless ShowKeys.
const redacted = "[redacted]"

// Failed is the request's error for err, the engine's error deciding key:
// the key named, for the framework's error handler. Unless ShowKeys the
// key is "[redacted]", in err's text too (a store's error may name it),
// while errors.Is and errors.As still reach err.
func (p *Path) Failed(key string, err error) error {
	if p.ShowKeys {
		return fmt.Errorf("limiter: key %q: %w", key, err)
	}
	return &redactedError{key: key, err: err}
}

// redactedError is a request's error with its key kept out of the text.
type redactedError struct {
	key string
	err error
}

// redactsFrom is the shortest key replaced within an error's text; a
// shorter one would mangle the words around it and tells little anyway.
const redactsFrom = 4

func (e *redactedError) Error() string {
	text := e.err.Error()
	if len(e.key) >= redactsFrom {
		text = strings.ReplaceAll(text, e.key, redacted)
	}
	return "limiter: key " + strconv.Quote(redacted) + ": " + text
}

func (e *redactedError) Unwrap() error { return e.err }

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
	// Slot is the slot a Concurrency limiter's request holds (Path.Concurrency),
	// which Release gives back.
	Slot quota.Slot
}

// Adjusts reports whether an admitted request may be refunded after its
// handler (SkipFailedRequests or SkipSuccessfulRequests): its key and ID
// must then outlive request buffers that the handler may reuse.
func (p *Path) Adjusts() bool { return p.SkipFailed || p.SkipOK }

// Take decides r into res. A Concurrency limiter's request that is
// admitted holds a slot (r.Slot) until Release.
func (p *Path) Take(ctx context.Context, r *Request, res *quota.Result) (err error) {
	switch {
	case p.Concurrency != nil:
		return p.acquire(ctx, r, res)
	case p.MaxDelay > 0 && p.DryRun:
		// A dry run rejects nothing, and so holds no request back either.
		err = p.Engine.TakeInto(ctx, r.Key, r.Cost, res)
	case r.First != (quota.Limit{}):
		*res, err = p.Engine.TakeWith(ctx, r.Key, r.Cost, r.First)
	case r.Idempotent:
		*res, err = p.Engine.TakeIdempotent(ctx, r.Key, r.ID, r.Cost)
	case p.MaxDelay > 0:
		return p.wait(ctx, r, res)
	default:
		err = p.Engine.TakeInto(ctx, r.Key, r.Cost, res)
	}
	return err
}

// wait decides r as a take that may wait up to MaxDelay for its turn, and
// waits for it under ctx: res is the take's Result, at its turn. A request
// whose ctx ends first gives its turn back, and res is then a rejection.
func (p *Path) wait(ctx context.Context, r *Request, res *quota.Result) error {
	turn, err := p.Engine.Reserve(ctx, r.Key, r.Cost, p.MaxDelay)
	if err != nil {
		return err
	}
	_ = turn.Wait(ctx) // an error leaves turn a rejection: the client is gone
	*res = turn.Result
	return nil
}

// Finish gives back the cost of r, admitted as res, when its response
// status says so (Skip*Requests), and updates res to the state it leaves.
// A failed refund leaves res as it was: the request was counted; with
// FailError its error (Failed's) is returned, else nil.
func (p *Path) Finish(ctx context.Context, r *Request, status int, res *quota.Result) error {
	if !res.Allowed() || r.Cost == 0 || !p.Adjusts() {
		return nil
	}
	if failed := status >= 400; (failed && p.SkipFailed) || (!failed && p.SkipOK) {
		after, err := p.Engine.RefundIdempotent(ctx, r.Key, r.ID, r.Cost, res)
		switch {
		case err == nil:
			*res = after
		case p.FailError:
			return p.Failed(r.Key, err)
		}
	}
	return nil
}

// acquire takes a slot for r, waiting up to MaxDelay for one: res is
// the answer as a Result (Limit Max, Remaining the free slots). A
// request whose ctx ends while it waits holds none and is rejected.
func (p *Path) acquire(ctx context.Context, r *Request, res *quota.Result) error {
	var err error
	if p.MaxDelay > 0 && !p.DryRun { // a dry run holds no request back
		r.Slot, err = p.Concurrency.AcquireWait(ctx, r.Key, p.MaxDelay)
		if err != nil && ctx.Err() != nil {
			r.Slot, err = p.Concurrency.Rejected(), nil // the client is gone
		}
	} else {
		r.Slot, err = p.Concurrency.Acquire(ctx, r.Key)
	}
	if err != nil {
		return err
	}
	*res = p.Concurrency.Result(&r.Slot)
	return nil
}

// Release gives back the slot of r, a Concurrency limiter's request,
// however its handler ended; the request's end does not stop it (the
// engine ignores ctx's cancellation). A failed release reaches
// OnStorageError (or the log) and is made good later. It does nothing for
// other limiters.
func (p *Path) Release(ctx context.Context, r *Request) {
	if p.Concurrency != nil {
		_ = p.Concurrency.Release(ctx, &r.Slot)
	}
}

// Event describes the decision res of r for OnDecision.
func (p *Path) Event(r *Request, res *quota.Result) quota.DecisionEvent {
	if p.Concurrency != nil {
		ev := p.Concurrency.Event(r.Key, &r.Slot)
		ev.DryRun = p.DryRun
		ev.Latency = time.Since(r.Start)
		return ev
	}
	ev := p.Engine.Event(r.Key, r.Cost, res)
	ev.DryRun = p.DryRun
	ev.Latency = time.Since(r.Start)
	return ev
}
