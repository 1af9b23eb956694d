// Package nethttp is the limiter as a net/http middleware, a
// func(http.Handler) http.Handler for plain servers, chi, gorilla/mux and
// any router that takes one. It decides with the same engine (package
// quota) and sends the same headers as the Fiber middlewares of this
// module: a fixed window, a sliding window, a token bucket or a sliding
// log per key, millisecond-exact, in memory or, given a go-redis client
// (Config.Redis), exact across replicas by one Lua script call per
// decision.
//
//	limit := nethttp.New(nethttp.Config{Max: 100, Expiration: time.Minute})
//	http.ListenAndServe(":8080", limit(mux))
package nethttp

import (
	"cmp"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/internal/adapter"
	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/fiberlimit/limiter/internal/headers"
	"github.com/fiberlimit/limiter/quota"
)

// New returns the middleware for cfg. It panics if cfg is invalid, naming
// the field.
func New(cfg Config) func(http.Handler) http.Handler {
	return build(cfg, false)
}

// NewConcurrency returns the middleware that caps a key's requests in
// flight rather than a rate: at most Max of them run at once (across
// replicas with Redis), each holding a slot from before the handler to
// when it ends, however it ends (a panic goes on). Expiration is the
// longest a slot stays taken when its process dies before giving it back:
// set it above the longest request. With MaxDelay a request waits up to
// that long for a slot instead of 429; a client that goes away stops
// waiting. Headers: Limit is Max, Remaining the free slots, Reset 0, and
// a 429's Retry-After 1 second. Algorithm is not read; Skip*Requests,
// MaxFunc, Cost, IdempotencyKey, Limits, Burst, Lease, BlockFor and
// MinInterval make it panic.
func NewConcurrency(cfg Config) func(http.Handler) http.Handler {
	return build(cfg, true)
}

// build returns the middleware for cfg: a rate limiter, or with slots a
// concurrency limiter.
func build(cfg Config, slots bool) func(http.Handler) http.Handler {
	m, _ := buildPath(cfg, slots)
	return m
}

// buildPath is build, and it returns the middleware's path.
func buildPath(cfg Config, slots bool) (func(http.Handler) http.Handler, *adapter.Path) {
	if cfg.Algorithm == 0 {
		cfg.Algorithm = FixedWindow
	}
	if len(cfg.Limits) == 0 {
		cfg.Max = cmp.Or(cfg.Max, quota.DefaultMax)
		cfg.Expiration = cmp.Or(cfg.Expiration, quota.DefaultExpiration)
	} else if cfg.Max != 0 || cfg.Expiration != 0 {
		panic("limiter: Limits is set, and so are Max (" + strconv.Itoa(cfg.Max) + ") or Expiration (" + cfg.Expiration.String() + "); set each limit's Max and Expiration in Limits only")
	}
	if cfg.Redis != nil && cfg.Storage != nil {
		panic("limiter: Redis and Storage are both set; set one")
	}
	s := adapter.Settings{
		Algorithm:      cfg.Algorithm,
		Concurrency:    slots,
		MaxFunc:        cfg.MaxFunc != nil,
		IdempotencyKey: cfg.IdempotencyKey != nil,
		Cost:           cfg.Cost != nil,
		Clock:          cfg.clock,
	}
	if cfg.Redis != nil {
		s.Storage = cfg.Redis
	}
	l := &limiter{cfg: cfg, Path: adapter.MustBuild(&cfg, s)}
	l.FailError = cfg.FailurePolicy == FailError
	if l.cfg.KeyGenerator == nil {
		bits := cmp.Or(cfg.IPv6Prefix, clientaddr.DefaultIPv6Prefix)
		l.cfg.KeyGenerator = func(r *http.Request) string { return remoteKey(r, bits) }
	}
	if l.cfg.LimitReached == nil {
		l.cfg.LimitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		})
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
	}, l.Path
}

// remoteKey is the key of the client at r.RemoteAddr ("host:port").
func remoteKey(r *http.Request, bits int) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return clientaddr.Key(host, bits)
}

// limiter is the one middleware body for every algorithm and backend.
type limiter struct {
	*adapter.Path
	cfg Config
}

func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if l.cfg.Next != nil && l.cfg.Next(r) {
		next.ServeHTTP(w, r)
		return
	}
	req := adapter.Request{Cost: 1}
	if l.cfg.MaxFunc != nil {
		// 0 leaves the request unlimited, below 0 rejects it (a plan that
		// admits nothing; see quota.Limiter.TakeWith).
		if req.First.Max = l.cfg.MaxFunc(r); req.First.Max == 0 {
			next.ServeHTTP(w, r)
			return
		}
	}
	if l.cfg.Cost != nil {
		if req.Cost = l.cfg.Cost(r); req.Cost < 0 {
			http.Error(w, "limiter: Cost returned "+strconv.Itoa(req.Cost)+"; it must be >= 0", http.StatusInternalServerError)
			return
		}
	}
	req.Key = l.cfg.KeyGenerator(r)
	if req.Key == "" {
		l.EmptyKey()
	}
	if l.cfg.OnDecision != nil {
		req.Start = time.Now()
	}
	if l.cfg.IdempotencyKey != nil && req.First == (quota.Limit{}) {
		req.Idempotent, req.ID = true, l.cfg.IdempotencyKey(r)
	}
	var res quota.Result
	err := l.Take(r.Context(), &req, &res)
	if l.Concurrency != nil {
		// A Concurrency limiter's slot goes back however the request
		// ends: rejected, its hook or its handler panicking (the panic
		// goes on), or served.
		defer l.Release(r.Context(), &req)
	}
	if err != nil {
		// The error (a store's, with FailError) is not the client's to
		// read; a failed store call reaches OnStorageError or the log.
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	if l.cfg.OnDecision != nil {
		l.cfg.OnDecision(r, l.Event(&req, &res))
	}
	switch res.Source() {
	case quota.SourceFailOpen:
		next.ServeHTTP(w, r)
		return
	case quota.SourceFailClosed:
		if l.DryRun {
			next.ServeHTTP(w, r)
			return
		}
		if !l.Headers.Silent() {
			var buf [20]byte
			w.Header().Set("Retry-After", string(headers.FailClosedRetryAfter(buf[:0], fields(w.Header()), res.RetryAfter())))
		}
		markRejected(w)
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	if !res.Allowed() && !l.DryRun {
		var out headers.Out
		l.Headers.Write(&out, fields(w.Header()), &res, req.Key, false)
		setFields(w.Header(), &out)
		markRejected(w)
		l.cfg.LimitReached.ServeHTTP(w, r)
		return
	}
	rw := &responseWriter{ResponseWriter: w, l: l, r: r, req: req, res: res}
	returned := false
	defer func() {
		// The handler panicked (or called runtime.Goexit) before its status
		// went out: it failed. Its panic goes on as it was.
		if !returned {
			rw.before(http.StatusInternalServerError)
		}
	}()
	next.ServeHTTP(rw, r)
	returned = true
	rw.before(http.StatusOK) // a handler that wrote nothing answers 200
}
