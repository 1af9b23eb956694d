package nethttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fiberlimit/limiter/internal/behaviour"
	"github.com/fiberlimit/limiter/quota"
)

// stdlib is the behaviour table's adapter for this package: the middleware
// in front of the table's handler, called with httptest's recorder.
type stdlib struct{}

var algorithms = map[behaviour.Algorithm]quota.Algorithm{
	behaviour.FixedWindow:   quota.FixedWindow,
	behaviour.SlidingWindow: quota.SlidingWindow,
	behaviour.TokenBucket:   quota.TokenBucket,
	behaviour.SlidingLog:    quota.SlidingLog,
}

func (stdlib) Serve(t *testing.T, bc behaviour.Config, clock *behaviour.Clock) func(behaviour.Request) behaviour.Response {
	cfg := Config{
		Algorithm:              algorithms[bc.Algorithm],
		Max:                    bc.Max,
		Expiration:             bc.Expiration,
		SkipFailedRequests:     bc.SkipFailedRequests,
		SkipSuccessfulRequests: bc.SkipSuccessfulRequests,
		DisableHeaders:         bc.DisableHeaders,
		BlockFor:               bc.BlockFor,
		MinInterval:            bc.MinInterval,
		MaxDelay:               bc.MaxDelay,
	}
	if bc.Idempotent {
		cfg.IdempotencyKey = IdempotencyKeyHeader
	}
	if bc.KeyFromHeader {
		cfg.KeyGenerator = func(r *http.Request) string { return r.Header.Get("X-Key") }
	}
	if bc.MaxFromHeader {
		cfg.MaxFunc = func(r *http.Request) int { return behaviour.PlanOf(r.Header.Get("X-Plan")) }
	}
	if path := bc.ExpensivePath; path != "" {
		cfg.Cost = func(r *http.Request) int {
			if r.URL.Path == path {
				return 3
			}
			return 1
		}
	}
	if path := bc.NextPath; path != "" {
		cfg.Next = func(r *http.Request) bool { return r.URL.Path == path }
	}
	if bc.Teapot {
		cfg.LimitReached = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte("slow down"))
		})
	}
	if clock != nil {
		cfg.clock = clock.Millis
	}
	build := New
	if bc.Algorithm == behaviour.Concurrency {
		build = NewConcurrency
	}
	if bc.Operate != nil {
		l := NewLimiter(cfg)
		bc.Operate(l)
		build = func(Config) func(http.Handler) http.Handler { return l.Handler() }
	}
	h := build(cfg)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case behaviour.Bad:
			w.WriteHeader(http.StatusBadRequest)
		case behaviour.Err:
			http.Error(w, "down", http.StatusServiceUnavailable)
		case behaviour.Boom:
			http.Error(w, "boom", http.StatusInternalServerError)
		case behaviour.Hold:
			bc.Gate.Wait()
			http.Error(w, "boom", http.StatusInternalServerError)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}))
	return func(r behaviour.Request) behaviour.Response {
		req := r.HTTP()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return behaviour.Response{Status: rec.Code, Header: rec.Result().Header}
	}
}

// The behaviour table, on the net/http middleware.
func TestBehaviourNetHTTP(t *testing.T) {
	behaviour.Run(t, stdlib{})
}
