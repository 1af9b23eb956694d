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
	"context"
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
	if cfg.Algorithm == 0 {
		cfg.Algorithm = quota.FixedWindow
	}
	if len(cfg.Limits) == 0 {
		if cfg.Max == 0 {
			cfg.Max = 5
		}
		if cfg.Expiration == 0 {
			cfg.Expiration = time.Minute
		}
	} else if cfg.Max != 0 || cfg.Expiration != 0 {
		panic("limiter: Limits is set, and so are Max (" + strconv.Itoa(cfg.Max) + ") or Expiration (" + cfg.Expiration.String() + "); set each limit's Max and Expiration in Limits only")
	}
	if cfg.Redis != nil && cfg.Storage != nil {
		panic("limiter: Redis and Storage are both set; set one")
	}
	s := adapter.Settings{
		Algorithm:      cfg.Algorithm,
		MaxFunc:        cfg.MaxFunc != nil,
		IdempotencyKey: cfg.IdempotencyKey != nil,
		Clock:          cfg.clock,
	}
	s.CopyFrom(&cfg)

	switch {
	case cfg.Redis != nil:
		s.Storage = cfg.Redis
	case cfg.Storage != nil:
		s.Storage = cfg.Storage
	}
	for _, l := range cfg.Limits {
		s.Limits = append(s.Limits, adapter.Limit(l))
	}
	engine, w, err := s.Build()
	if err != nil {
		panic(err.Error())
	}
	l := &limiter{cfg: cfg, engine: engine, headers: w}
	if l.cfg.KeyGenerator == nil {
		bits := orDefault(cfg.IPv6Prefix, clientaddr.DefaultIPv6Prefix)
		l.cfg.KeyGenerator = func(r *http.Request) string { return remoteKey(r, bits) }
	}
	if l.cfg.LimitReached == nil {
		l.cfg.LimitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
		})
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, next) })
	}
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
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
	cfg     Config
	engine  *quota.Limiter
	headers *headers.Writer
}

func (l *limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if l.cfg.Next != nil && l.cfg.Next(r) {
		next.ServeHTTP(w, r)
		return
	}
	max := 0
	if l.cfg.MaxFunc != nil {
		if max = l.cfg.MaxFunc(r); max <= 0 {
			next.ServeHTTP(w, r)
			return
		}
	}
	cost := 1
	if l.cfg.Cost != nil {
		if cost = l.cfg.Cost(r); cost < 0 {
			http.Error(w, "limiter: Cost returned "+strconv.Itoa(cost)+"; it must be >= 0", http.StatusInternalServerError)
			return
		}
	}
	key := l.cfg.KeyGenerator(r)
	var start time.Time
	if l.cfg.OnDecision != nil {
		start = time.Now()
	}
	var res quota.Result
	var err error
	var id string // the request's IdempotencyKey
	switch {
	case max > 0:
		res, err = l.engine.TakeWith(r.Context(), key, cost, quota.Limit{Max: max})
	case l.cfg.IdempotencyKey != nil:
		id = l.cfg.IdempotencyKey(r)
		res, err = l.engine.TakeOnce(r.Context(), key, id, cost)
	default:
		err = l.engine.TakeInto(r.Context(), key, cost, &res)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if l.cfg.OnDecision != nil {
		l.report(r, key, cost, &res, start)
	}
	switch res.Source() {
	case quota.SourceFailOpen:
		next.ServeHTTP(w, r)
		return
	case quota.SourceFailClosed:
		if l.cfg.DryRun {
			next.ServeHTTP(w, r)
			return
		}
		var buf [20]byte
		value := headers.RetryAfterValue(buf[:0], res.RetryAfter())
		if front := headers.ExhaustedInFront(fields(w.Header()), nil); front > int64(res.RetryAfter()/time.Second) {
			value = strconv.AppendInt(buf[:0], front, 10)
		}
		w.Header().Set("Retry-After", string(value))
		markRejected(w)
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	if !res.Allowed() && !l.cfg.DryRun {
		var out headers.Out
		l.headers.Write(&out, fields(w.Header()), &res, key, false)
		setFields(w.Header(), &out)
		markRejected(w)
		l.cfg.LimitReached.ServeHTTP(w, r)
		return
	}
	rw := &responseWriter{ResponseWriter: w, l: l, r: r, key: key, id: id, cost: cost, res: res}
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

// report calls OnDecision with the result res on key, taken since start.
func (l *limiter) report(r *http.Request, key string, cost int, res *quota.Result, start time.Time) {
	i := res.TightestIndex()
	d := res.Decisions()[i]
	l.cfg.OnDecision(r, quota.DecisionEvent{
		Key:        key,
		Allowed:    d.Allowed,
		DryRun:     l.cfg.DryRun,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Cost:       cost,
		RetryAfter: res.RetryAfter(),
		Expiration: l.engine.Expiration(res, i),
		Algorithm:  l.engine.Algorithm().String(),
		Backend:    l.engine.Backend(),
		Source:     res.Source(),
		Latency:    time.Since(start),
	})
}

// refund gives back the cost of an admitted request that ended with
// status, when Skip*Requests says so, and returns the result to describe.
func (l *limiter) refund(ctx context.Context, key, id string, cost, status int, res *quota.Result) quota.Result {
	if !res.Allowed() || cost == 0 {
		return *res
	}
	failed := status >= http.StatusBadRequest
	if (failed && l.cfg.SkipFailedRequests) || (!failed && l.cfg.SkipSuccessfulRequests) {
		if after, err := l.engine.RefundOnce(ctx, key, id, cost, res); err == nil {
			return after
		}
	}
	return *res
}
