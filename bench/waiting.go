package main

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// waitLoad is how many times its limit figure 8a offers to a key.
const waitLoad = 3

// waitVariant is one limiter of figure 8a: an algorithm, on Redis as
// o.replicas replicas each with its own client, or in memory as one app.
type waitVariant struct {
	name  string
	alg   limiter.LimiterHandler
	redis bool
}

// waitVariants are the variants of figure 8a: every algorithm on Redis,
// then in memory.
func waitVariants(o options) []waitVariant {
	algs := []struct {
		name string
		alg  limiter.LimiterHandler
	}{
		{"ours-fixed", limiter.FixedWindow{}},
		{"ours-sliding", limiter.SlidingWindow{}},
		{"ours-token", limiter.TokenBucket{}},
		{"ours-log", limiter.SlidingLog{}},
	}
	var vs []waitVariant
	for _, a := range algs {
		vs = append(vs, waitVariant{fmt.Sprintf("%s, redis ×%d", a.name, o.replicas), a.alg, true})
	}
	for _, a := range algs {
		vs = append(vs, waitVariant{a.name + ", memory", a.alg, false})
	}
	return vs
}

// waitConfig is the Config of figure 8a: o.waitRate per o.waitWindow
// (the token bucket with a Burst of a tenth of that), and a request
// waits up to o.waitWindow for its turn. FailClosed turns a storage
// failure into a 503, counted as failed.
func waitConfig(alg limiter.LimiterHandler, o options) limiter.Config {
	cfg := limiter.Config{
		Name: "bench-wait", Max: o.waitRate, Expiration: o.waitWindow, KeyGenerator: headerKey, LimiterMiddleware: alg,
		MaxDelay: o.waitWindow, FailurePolicy: limiter.FailClosed, StorageTimeout: o.storageTimeout,
	}
	if _, ok := alg.(limiter.TokenBucket); ok {
		cfg.Burst = max(1, o.waitRate/10)
	}
	return cfg
}

// open starts v's apps: o.replicas on Redis, each with its own client,
// or one in memory; close releases the clients.
func (v waitVariant) open(srv *redisServer, o options) (apps []fasthttp.RequestHandler, close func()) {
	if !v.redis {
		return []fasthttp.RequestHandler{newApp(limiter.New(waitConfig(v.alg, o)))}, func() {}
	}
	var stores []*redis.Store
	for range o.replicas {
		store := redis.New(srv.client(16))
		cfg := waitConfig(v.alg, o)
		cfg.Storage = store
		apps = append(apps, newApp(limiter.New(cfg)))
		stores = append(stores, store)
	}
	return apps, func() {
		for _, s := range stores {
			_ = s.Close()
		}
	}
}

// waitSample is what one run of a variant gave, counted over the
// measured span [warm-up, warm-up + waitTime) after the first request was
// sent: admissions whose response came in it, and of the requests sent
// in it, the rejected and the failed.
type waitSample struct {
	sent, admitted, rejected, failed int
	waits                            []int64 // ns from send to response of the admissions counted, sorted
	firstErr                         error
}

// waitWarmUp is how long figure 8a offers requests before it counts
// them: a window and a half. The fixed window and the log admit in bursts,
// one a window from the first request on (the first before anyone waits),
// so the measured span's edges fall midway between two bursts, where a
// burst's jitter or a millisecond clock's rounding moves nothing in or
// out of it.
func waitWarmUp(o options) time.Duration { return o.waitWindow * 3 / 2 }

// offered sends o.waitRate × waitLoad requests per o.waitWindow for key,
// request i at i/(that rate) after the start (late ones at once: the
// sender catches up), each from its own goroutine (a waiter blocks its
// caller), in turn to each app, for waitWarmUp then o.waitTime; it waits
// for the last response and counts them.
func offered(apps []fasthttp.RequestHandler, key string, o options) waitSample {
	interval := o.waitWindow / time.Duration(o.waitRate*waitLoad)
	warm := waitWarmUp(o)
	end := warm + o.waitTime
	n := int(end / interval)
	type answer struct {
		sent, done time.Duration // from the start
		code       int
	}
	answers := make([]answer, n)
	server := new(fasthttp.Server) // never started: its contexts are never canceled
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			req := newRequest()
			withServer(req, server)
			sent := time.Since(start)
			code := req.serve(apps[i%len(apps)], []byte(key))
			answers[i] = answer{sent, time.Since(start), code}
		})
	}
	wg.Wait()
	var s waitSample
	in := func(d time.Duration) bool { return d >= warm && d < end }
	for _, a := range answers {
		if a.code == fiber.StatusOK && in(a.done) {
			s.admitted++
			s.waits = append(s.waits, int64(a.done-a.sent))
		}
		if !in(a.sent) {
			continue
		}
		s.sent++
		switch a.code {
		case fiber.StatusOK:
		case fiber.StatusTooManyRequests:
			s.rejected++
		default:
			s.failed++
			if s.firstErr == nil {
				s.firstErr = fmt.Errorf("status %d", a.code)
			}
		}
	}
	slices.Sort(s.waits)
	return s
}

// withServer gives r's context the server that serves it, as fasthttp's
// server does: a waiting request selects on RequestCtx.Done, which reads
// it (and fails on a context no server gave). It does nothing if this
// fasthttp has no such field.
func withServer(r *request, server *fasthttp.Server) {
	f := reflect.ValueOf(r.ctx).Elem().FieldByName("s")
	if f.IsValid() && f.Type() == reflect.TypeOf(server) {
		*(**fasthttp.Server)(unsafe.Pointer(f.UnsafeAddr())) = server
	}
}

// waitingResult holds figure 8a: per variant, one sample per round.
type waitingResult struct {
	o        options
	variants []string
	samples  map[string][]waitSample
}

// runWaiting measures figure 8a: each round runs every variant in turn,
// each on a fresh key.
func runWaiting(o options, srv *redisServer) (*waitingResult, error) {
	variants := waitVariants(o)
	res := &waitingResult{o: o, samples: map[string][]waitSample{}}
	for _, v := range variants {
		res.variants = append(res.variants, v.name)
	}
	for round := range o.waitRounds {
		for _, vi := range rotate(len(variants), round) {
			v := variants[vi]
			progressf(o, "8a. MaxDelay at %dx the limit: round %d/%d, %s", waitLoad, round+1, o.waitRounds, v.name)
			apps, closeFn := v.open(srv, o)
			key := "wait-" + strconv.Itoa(round) + "-" + strconv.Itoa(vi) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			s := offered(apps, key, o)
			closeFn()
			if s.sent == 0 {
				return nil, fmt.Errorf("%s: no request sent in the measured span", v.name)
			}
			res.samples[v.name] = append(res.samples[v.name], s)
		}
	}
	return res, nil
}

// limit is how many admissions the limit allows over the measured span.
func (r *waitingResult) limit() float64 {
	return float64(r.o.waitRate) * float64(r.o.waitTime) / float64(r.o.waitWindow)
}

// tables renders figure 8a.
func (r *waitingResult) tables() []*table {
	o := r.o
	t := &table{
		title: fmt.Sprintf("8a. MaxDelay %v at %dx the limit: %d per %v, one key, %v measured (median over %d round(s))",
			o.waitWindow, waitLoad, o.waitRate, o.waitWindow, o.waitTime, o.waitRounds),
		header: []string{"variant", "offered / s", "admitted / s", "admitted / limit", "rejected (of sent)", "wait p50 ms", "wait p99 ms", "failed"},
		notes: []string{
			fmt.Sprintf("A paced sender offers %d per %v (request i at i/rate, each in its own goroutine, in turn to each replica) for %v of warm-up, then %v measured; then it waits for the last waiter.",
				o.waitRate*waitLoad, o.waitWindow, waitWarmUp(o), o.waitTime),
			"Admitted: responses 200 that came within the measured span (so the first window's burst, before any waiting, and the last waiters, after the sender stopped, are left out; the span's edges fall midway between the bursts of the fixed window and the log); rejected: 429s of the requests sent within it. Exact is admitted / limit = 1.00x, rejected 67%.",
			fmt.Sprintf("Wait: from a request's send to its response, of the admissions counted (Redis's decision included). ours-token: Burst %d. Redis rows: %d Fiber apps (app.Handler()), each with its own client, FailClosed.", max(1, o.waitRate/10), o.replicas),
		},
	}
	for _, v := range r.variants {
		var offered, admitted, ratio, rejected, p50, p99 []float64
		failed := 0
		var firstErr error
		for _, s := range r.samples[v] {
			span := o.waitTime.Seconds()
			offered = append(offered, float64(s.sent)/span)
			admitted = append(admitted, float64(s.admitted)/span)
			ratio = append(ratio, float64(s.admitted)/r.limit())
			rejected = append(rejected, float64(s.rejected)/float64(s.sent))
			p50 = append(p50, quantile(s.waits, 0.5))
			p99 = append(p99, quantile(s.waits, 0.99))
			failed += s.failed
			if firstErr == nil {
				firstErr = s.firstErr
			}
		}
		t.add(v, fmtRate(median(offered)), fmtRate(median(admitted)), fmt.Sprintf("%.3fx", median(ratio)),
			fmt.Sprintf("%.1f%%", 100*median(rejected)), fmtMillis(median(p50)), fmtMillis(median(p99)), strconv.Itoa(failed))
		if firstErr != nil {
			t.notes = append(t.notes, fmt.Sprintf("WARNING: %s: first failure: %v", v, firstErr))
		}
	}
	return []*table{t}
}

// fmtMillis writes nanoseconds as milliseconds, with a decimal below 10.
func fmtMillis(ns float64) string {
	ms := ns / 1e6
	switch {
	case math.IsNaN(ms):
		return "-"
	case ms < 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.0f", ms)
	}
}
