// Package behaviour is the one table of behaviours that every adapter of
// the limiter (the Fiber v2 middleware, and each other framework's) must
// show: statuses and exact headers on 200 and 429 for each algorithm,
// sub-second windows, Next, KeyGenerator and LimitReached, Skip*Requests
// with failed handlers, MaxFunc and Cost, DisableHeaders, and exactly Max
// admitted under concurrency. An adapter's test implements Adapter and
// calls Run; the cases are written once, here.
package behaviour

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/quota"
)

// Algorithm names a LimiterMiddleware in an adapter-neutral way.
type Algorithm string

// The algorithms every adapter offers.
const (
	FixedWindow   Algorithm = "FixedWindow"
	SlidingWindow Algorithm = "SlidingWindow"
	TokenBucket   Algorithm = "TokenBucket"
	SlidingLog    Algorithm = "SlidingLog"
)

// Algorithms are the algorithms, in the order the cases run them.
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, TokenBucket, SlidingLog}

// Concurrency is the cap on a key's requests in flight (Concurrency{},
// or net/http's NewConcurrency): Max of them at once, Expiration the
// longest a slot is held.
const Concurrency Algorithm = "Concurrency"

// Config is a case's limiter, which an adapter builds in its own
// framework's terms. Zero fields mean the adapter's defaults (Max 5 per
// minute, the fixed window, the client's address as the key).
type Config struct {
	Algorithm  Algorithm
	Max        int
	Expiration time.Duration
	// KeyFromHeader keys requests by their X-Key header.
	KeyFromHeader bool
	// MaxFromHeader makes Max per request the number in the X-Plan header
	// (MaxFunc; 0 means no limit).
	MaxFromHeader bool
	// ExpensivePath costs 3 (Cost), every other path 1.
	ExpensivePath string
	// NextPath is skipped by the limiter (Next).
	NextPath string
	// Teapot answers a rejection with 418 and "slow down" (LimitReached).
	Teapot                 bool
	SkipFailedRequests     bool
	SkipSuccessfulRequests bool
	DisableHeaders         bool
	// BlockFor holds a rejected client off (BlockFor).
	BlockFor time.Duration
	// MinInterval spaces a client's admitted requests (MinInterval).
	MinInterval time.Duration
	// Idempotent names requests by their Idempotency-Key header
	// (IdempotencyKey: IdempotencyKeyHeader).
	Idempotent bool
	// Gate holds the requests to Hold in their handler (nil: none).
	Gate *Gate
	// MaxDelay makes a request wait up to that long for its turn (or a
	// slot) instead of 429 (MaxDelay).
	MaxDelay time.Duration
	// Operate, when set, is given the limiter's operators' controls: the
	// adapter builds the limiter with its NewLimiter.
	Operate func(Controls)
}

// Controls are an adapter's operators' controls (its Limiter's Peek,
// Reset and Block), for keys as the KeyGenerator makes them.
type Controls interface {
	Peek(ctx context.Context, key string) (quota.Status, error)
	Reset(ctx context.Context, key string) error
	Block(ctx context.Context, key string, d time.Duration) (quota.Status, error)
}

// Request is one request to a case's server.
type Request struct {
	Path string // "/ok" unless set
	Key  string // the X-Key header, when set
	Plan string // the X-Plan header, when set
	// Idempotency is the Idempotency-Key header, when set.
	Idempotency string
}

// HTTP is r as a GET request, with its headers, for a server or a
// framework's test call.
func (r Request) HTTP() *http.Request {
	path := r.Path
	if path == "" {
		path = OK
	}
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if r.Key != "" {
		req.Header.Set("X-Key", r.Key)
	}
	if r.Plan != "" {
		req.Header.Set("X-Plan", r.Plan)
	}
	if r.Idempotency != "" {
		req.Header.Set("Idempotency-Key", r.Idempotency)
	}
	return req
}

// Response is what a request got.
type Response struct {
	Status int
	Header http.Header
}

// Paths of the handler behind the limiter, in every adapter: OK answers
// 200; Bad sets 400; Err fails with the framework's own error of status
// 503; Boom fails with a plain error (500); Hold waits at the case's
// Gate, then fails as Boom does. Any other path answers 200.
const (
	OK   = "/ok"
	Bad  = "/bad"
	Err  = "/err"
	Boom = "/boom"
	Hold = "/hold"
)

// Gate holds requests in their handler: a case sends one to Hold, waits
// until it is in (Entered), sends others, then lets it end (Open).
type Gate struct{ entered, release chan struct{} }

// NewGate returns a closed Gate.
func NewGate() *Gate { return &Gate{entered: make(chan struct{}), release: make(chan struct{})} }

// Wait is what the handler of Hold calls: it says the request is in, and
// returns once the Gate opens.
func (g *Gate) Wait() {
	g.entered <- struct{}{}
	<-g.release
}

// Entered returns once a request waits at the Gate.
func (g *Gate) Entered() { <-g.entered }

// Open lets the requests at the Gate end.
func (g *Gate) Open() { close(g.release) }

// Clock is a settable clock in ms that an adapter gives its limiter.
type Clock struct{ ms atomic.Int64 }

// Millis is the clock's time in ms.
func (c *Clock) Millis() int64 { return c.ms.Load() }

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// Adapter builds a server for a case: a limiter configured as cfg, on
// clock (nil: the real clock), in front of the handler of the paths above.
// The returned function sends one request; it must be safe for concurrent
// use.
type Adapter interface {
	Serve(t *testing.T, cfg Config, clock *Clock) func(Request) Response
}
