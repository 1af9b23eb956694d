package behaviour

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Run runs every case against a, each as a subtest.
func Run(t *testing.T, a Adapter) {
	cases := []struct {
		name string
		run  func(t *testing.T, a Adapter)
	}{
		{"StatusesAndHeaders", statusesAndHeaders},
		{"MillisecondWindows", millisecondWindows},
		{"Next", next},
		{"KeyGeneratorAndLimitReached", keyGeneratorAndLimitReached},
		{"SkipRequests", skipRequests},
		{"MaxFuncAndCost", maxFuncAndCost},
		{"RefundUnderAnotherMaxFunc", refundUnderAnotherMaxFunc},
		{"DisableHeaders", disableHeaders},
		{"ConcurrentExact", concurrentExact},
		{"BlockFor", blockFor},
		{"BlockShorterThanLimit", blockShorterThanLimit},
		{"MinInterval", minInterval},
		{"IdempotentRetries", idempotentRetries},
		{"MaxDelay", maxDelay},
		{"Concurrency", concurrency},
		{"Operators", operators},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, a) })
	}
}

// headers is the rate-limit header set of a response, "" where absent.
type headers struct{ limit, remaining, reset, retryAfter string }

func headersOf(r Response) headers {
	return headers{
		r.Header.Get("X-RateLimit-Limit"), r.Header.Get("X-RateLimit-Remaining"),
		r.Header.Get("X-RateLimit-Reset"), r.Header.Get("Retry-After"),
	}
}

// Max 2 per 10 s, on a clock that stands still until the last request,
// 2.5 s on: the statuses and every X-RateLimit header, to the second.
func statusesAndHeaders(t *testing.T, a Adapter) {
	want := map[Algorithm][]headers{
		FixedWindow: {{"2", "1", "10", ""}, {"2", "0", "10", ""}, {"2", "0", "10", "10"}, {"2", "0", "8", "8"}},
		// In the next window the two hits weigh 2*(1-e/10s): one more fits
		// from e = 5 s.
		SlidingWindow: {{"2", "1", "20", ""}, {"2", "0", "20", ""}, {"2", "0", "20", "15"}, {"2", "0", "18", "13"}},
		// The bucket refills one token per 5 s.
		TokenBucket: {{"2", "1", "5", ""}, {"2", "0", "10", ""}, {"2", "0", "10", "5"}, {"2", "0", "8", "3"}},
		// Reset is when the oldest hit leaves, 10 s after it.
		SlidingLog: {{"2", "1", "10", ""}, {"2", "0", "10", ""}, {"2", "0", "10", "10"}, {"2", "0", "8", "8"}},
	}
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			send := a.Serve(t, Config{Algorithm: alg, Max: 2, Expiration: 10 * time.Second}, clock)
			var got []headers
			var codes []int
			for i := range 4 {
				if i == 3 {
					clock.Advance(2500 * time.Millisecond)
				}
				r := send(Request{})
				codes = append(codes, r.Status)
				got = append(got, headersOf(r))
			}
			assert.Equal(t, []int{200, 200, 429, 429}, codes)
			assert.Equal(t, want[alg], got)
		})
	}
}

// A window of 100 ms: the wait rounds up to a second in Retry-After, and
// two windows later every algorithm admits again.
func millisecondWindows(t *testing.T, a Adapter) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			send := a.Serve(t, Config{Algorithm: alg, Max: 1, Expiration: 100 * time.Millisecond}, clock)
			require.Equal(t, 200, send(Request{}).Status)
			r := send(Request{})
			require.Equal(t, 429, r.Status)
			require.Equal(t, "1", r.Header.Get("Retry-After"), "sub-second waits round up to 1")
			clock.Advance(200 * time.Millisecond)
			require.Equal(t, 200, send(Request{}).Status)
		})
	}
}

// A path that Next skips is neither limited nor counted, and has no
// headers.
func next(t *testing.T, a Adapter) {
	send := a.Serve(t, Config{Max: 1, NextPath: "/free"}, &Clock{})
	for range 3 {
		r := send(Request{Path: "/free"})
		require.Equal(t, 200, r.Status)
		require.Empty(t, r.Header.Get("X-RateLimit-Limit"))
	}
	require.Equal(t, 200, send(Request{}).Status)
	require.Equal(t, 429, send(Request{}).Status)
}

// Keys are counted apart, and LimitReached answers a rejection, with the
// headers set.
func keyGeneratorAndLimitReached(t *testing.T, a Adapter) {
	send := a.Serve(t, Config{Max: 1, KeyFromHeader: true, Teapot: true}, &Clock{})
	require.Equal(t, 200, send(Request{Key: "a"}).Status)
	require.Equal(t, 200, send(Request{Key: "b"}).Status)
	r := send(Request{Key: "a"})
	require.Equal(t, http.StatusTeapot, r.Status)
	require.Equal(t, "60", r.Header.Get("Retry-After"))
	require.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
}

// SkipFailedRequests gives a failed request's cost back, whether the
// handler set a failing status, returned the framework's error or a plain
// one; SkipSuccessfulRequests gives a successful one's back; the others
// count.
func skipRequests(t *testing.T, a Adapter) {
	cases := []struct {
		name       string
		cfg        Config
		path       string
		wantStatus int
		free       bool // every request's cost comes back
	}{
		{"failed status is skipped", Config{SkipFailedRequests: true}, Bad, 400, true},
		{"framework error counts as failed", Config{SkipFailedRequests: true}, Err, 503, true},
		{"plain error counts as failed", Config{SkipFailedRequests: true}, Boom, 500, true},
		{"success is counted with SkipFailed", Config{SkipFailedRequests: true}, OK, 200, false},
		{"success is skipped", Config{SkipSuccessfulRequests: true}, OK, 200, true},
		{"failure is counted with SkipSuccessful", Config{SkipSuccessfulRequests: true}, Err, 503, false},
	}
	for _, c := range cases {
		for _, alg := range Algorithms {
			t.Run(c.name+"/"+string(alg), func(t *testing.T) {
				cfg := c.cfg
				cfg.Max, cfg.Algorithm = 2, alg
				send := a.Serve(t, cfg, &Clock{})
				for i := range 5 {
					r := send(Request{Path: c.path})
					if c.free || i < 2 {
						require.Equal(t, c.wantStatus, r.Status, "request %d", i)
					} else {
						require.Equal(t, 429, r.Status, "request %d", i)
					}
				}
			})
		}
	}
}

// MaxFunc per request (0: unlimited, without headers; below 0: every
// request rejected, as in Fiber v3) and Cost: a cost above the limit is
// rejected for good, without Retry-After.
func maxFuncAndCost(t *testing.T, a Adapter) {
	send := a.Serve(t, Config{KeyFromHeader: true, MaxFromHeader: true, ExpensivePath: "/expensive"}, &Clock{})
	for range 10 {
		r := send(Request{Key: "free", Plan: "0"})
		require.Equal(t, 200, r.Status)
		require.Empty(t, r.Header.Get("X-RateLimit-Limit"))
	}
	for range 3 {
		r := send(Request{Key: "banned", Plan: "-1"})
		require.Equal(t, 429, r.Status, "a plan below 0 admits nothing")
		require.Empty(t, r.Header.Get("Retry-After"), "nor ever will")
		require.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
	}
	require.Equal(t, 200, send(Request{Key: "banned", Plan: "1"}).Status, "the rejections counted nothing")
	require.Equal(t, "1", send(Request{Path: "/expensive", Key: "pro", Plan: "4"}).Header.Get("X-RateLimit-Remaining"))
	require.Equal(t, 200, send(Request{Key: "pro", Plan: "4"}).Status)
	require.Equal(t, 429, send(Request{Key: "pro", Plan: "4"}).Status)
	r := send(Request{Path: "/expensive", Key: "tiny", Plan: "2"})
	require.Equal(t, 429, r.Status)
	require.Empty(t, r.Header.Get("Retry-After"))
	require.Equal(t, "2", r.Header.Get("X-RateLimit-Remaining"))
}

// A refund gives back what its request took, whatever the MaxFunc of the
// others: a request of plan 400 is held in its handler while requests of
// plan 1000 spend the key, then fails and is given back; exactly one more
// of plan 1000 fits, and the refunded one's own headers show its plan
// spent. Every algorithm that takes a MaxFunc.
func refundUnderAnotherMaxFunc(t *testing.T, a Adapter) {
	for _, alg := range Algorithms[:3] {
		t.Run(string(alg), func(t *testing.T) {
			gate := NewGate()
			send := a.Serve(t, Config{
				Algorithm: alg, Expiration: 500 * time.Second, KeyFromHeader: true, MaxFromHeader: true,
				SkipFailedRequests: true, Gate: gate,
			}, &Clock{})
			held := make(chan Response, 1)
			go func() { held <- send(Request{Path: Hold, Key: "k", Plan: "400"}) }()
			gate.Entered()
			spend := func() int {
				admitted := 0
				for range 1000 {
					if send(Request{Key: "k", Plan: "1000"}).Status == 200 {
						admitted++
					}
				}
				return admitted
			}
			require.Equal(t, 999, spend(), "the held request took one")
			gate.Open()
			r := <-held
			require.Equal(t, 500, r.Status)
			assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"), "plan 400 is spent after the refund too")
			assert.Equal(t, 1, spend(), "the refund gave back its one")
		})
	}
}

// DisableHeaders sends no rate-limit header at all, as in Fiber: neither
// the X-RateLimit headers nor Retry-After on a 429.
func disableHeaders(t *testing.T, a Adapter) {
	send := a.Serve(t, Config{Max: 1, DisableHeaders: true}, &Clock{})
	require.Equal(t, headers{}, headersOf(send(Request{})))
	r := send(Request{})
	require.Equal(t, 429, r.Status)
	require.Equal(t, headers{}, headersOf(r))
	require.Empty(t, r.Header.Get("RateLimit"))
	require.Empty(t, r.Header.Get("RateLimit-Policy"))
}

// 200 concurrent requests on one key with Max 50 per hour: exactly 50 are
// admitted, the rest rejected, for every algorithm.
func concurrentExact(t *testing.T, a Adapter) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			const max, callers = 50, 200
			send := a.Serve(t, Config{Algorithm: alg, Max: max, Expiration: time.Hour}, nil)
			var admitted, rejected atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					switch r := send(Request{}); r.Status {
					case 200:
						admitted.Add(1)
					case 429:
						rejected.Add(1)
					default:
						t.Errorf("status %d", r.Status)
					}
				}()
			}
			wg.Wait()
			require.Equal(t, int64(max), admitted.Load())
			require.Equal(t, int64(callers-max), rejected.Load())
		})
	}
}

// PlanOf is the Max of a request's X-Plan header, for MaxFromHeader.
func PlanOf(header string) int {
	n, _ := strconv.Atoi(header)
	return n
}

// Max 2 per second with BlockFor 1 min: the third request is rejected and
// blocks the client for the minute, with Retry-After saying so and nothing
// remaining, though the window refills within a second; another client is
// not held off; after the minute the client is admitted again.
func blockFor(t *testing.T, a Adapter) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			send := a.Serve(t, Config{Algorithm: alg, Max: 2, Expiration: time.Second, KeyFromHeader: true, BlockFor: time.Minute}, clock)
			for range 2 {
				require.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status)
			}
			r := send(Request{Key: "a"})
			require.Equal(t, http.StatusTooManyRequests, r.Status)
			assert.Equal(t, "60", r.Header.Get("Retry-After"))
			clock.Advance(20 * time.Second)
			r = send(Request{Key: "a"})
			require.Equal(t, http.StatusTooManyRequests, r.Status, "blocked though the window has refilled")
			assert.Equal(t, "40", r.Header.Get("Retry-After"))
			assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
			assert.Equal(t, http.StatusOK, send(Request{Key: "b"}).Status, "another client")
			clock.Advance(40 * time.Second)
			assert.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status, "the block has ended")
		})
	}
}

// Max 2 per minute with BlockFor 10 s: the third request starts a block,
// yet its Retry-After is when the limit has room again, which lies beyond
// the block, and so is a request's 5 s on; at that time the client is
// admitted.
func blockShorterThanLimit(t *testing.T, a Adapter) {
	want := map[Algorithm]int{FixedWindow: 60, SlidingWindow: 90, TokenBucket: 30, SlidingLog: 60}
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			send := a.Serve(t, Config{Algorithm: alg, Max: 2, Expiration: time.Minute, BlockFor: 10 * time.Second}, clock)
			for range 2 {
				require.Equal(t, http.StatusOK, send(Request{}).Status)
			}
			r := send(Request{})
			require.Equal(t, http.StatusTooManyRequests, r.Status)
			assert.Equal(t, strconv.Itoa(want[alg]), r.Header.Get("Retry-After"))
			clock.Advance(5 * time.Second)
			r = send(Request{})
			require.Equal(t, http.StatusTooManyRequests, r.Status)
			assert.Equal(t, strconv.Itoa(want[alg]-5), r.Header.Get("Retry-After"))
			clock.Advance(time.Duration(want[alg]-5) * time.Second)
			assert.Equal(t, http.StatusOK, send(Request{}).Status, "admitted at Retry-After")
		})
	}
}

// Max 2 per minute, requests named by their Idempotency-Key: a retry of an
// admitted request, 5 s on, gets its first decision again, with the same
// status and headers (Reset as the first had it), and counts nothing; a
// rejected request's retry is decided afresh (rejected again here, the
// limit still spent); a request without the header finds the two of p1
// and p2 spent.
func idempotentRetries(t *testing.T, a Adapter) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			send := a.Serve(t, Config{Algorithm: alg, Max: 2, Expiration: time.Minute, Idempotent: true}, clock)
			first := send(Request{Idempotency: "p1"})
			require.Equal(t, http.StatusOK, first.Status)
			clock.Advance(5 * time.Second)
			for range 2 {
				again := send(Request{Idempotency: "p1"})
				assert.Equal(t, http.StatusOK, again.Status)
				assert.Equal(t, headersOf(first), headersOf(again), "the first decision's headers")
			}
			require.Equal(t, http.StatusOK, send(Request{Idempotency: "p2"}).Status)
			rejected := send(Request{Idempotency: "p3"})
			require.Equal(t, http.StatusTooManyRequests, rejected.Status)
			clock.Advance(5 * time.Second)
			again := send(Request{Idempotency: "p3"})
			assert.Equal(t, http.StatusTooManyRequests, again.Status)
			assert.NotEqual(t, headersOf(rejected), headersOf(again), "decided afresh, 5 s on")
			assert.Equal(t, http.StatusTooManyRequests, send(Request{}).Status, "p1 and p2 counted once each")
		})
	}
}

// Max 100 per minute with MinInterval 200 ms: a request 150 ms after an
// admitted one gets 429 with Retry-After 1 (the 50 ms left, in whole
// seconds, rounded up) and counts nothing; one 200 ms after is admitted;
// another client is not held.
func minInterval(t *testing.T, a Adapter) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			send := a.Serve(t, Config{Algorithm: alg, Max: 100, Expiration: time.Minute, KeyFromHeader: true, MinInterval: 200 * time.Millisecond}, clock)
			require.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status)
			clock.Advance(150 * time.Millisecond)
			r := send(Request{Key: "a"})
			require.Equal(t, http.StatusTooManyRequests, r.Status)
			assert.Equal(t, "1", r.Header.Get("Retry-After"))
			assert.Equal(t, http.StatusOK, send(Request{Key: "b"}).Status, "another client")
			clock.Advance(50 * time.Millisecond)
			r = send(Request{Key: "a"})
			require.Equal(t, http.StatusOK, r.Status)
			assert.Equal(t, "98", r.Header.Get("X-RateLimit-Remaining"), "the rejected request counted nothing")
		})
	}
}

// Max 2 per 200 ms with MaxDelay 500 ms: the third request of a client
// waits for its turn (100 to 300 ms after the first, by the algorithm)
// and is served, with the limit's headers; another client is served at
// once.
func maxDelay(t *testing.T, a Adapter) {
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			send := a.Serve(t, Config{Algorithm: alg, Max: 2, Expiration: 200 * time.Millisecond, KeyFromHeader: true,
				MaxDelay: 500 * time.Millisecond}, nil)
			start := time.Now() // the turns count from the first request
			for range 2 {
				require.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status)
			}
			r := send(Request{Key: "a"})
			require.Equal(t, http.StatusOK, r.Status, "served at its turn")
			assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "no sooner than its turn")
			assert.Equal(t, "2", r.Header.Get("X-RateLimit-Limit"))
			assert.Equal(t, http.StatusOK, send(Request{Key: "b"}).Status, "another client")
		})
	}
}

// Concurrency Max 1: while a request of a client runs, the client's next
// gets 429 with Retry-After 1 and nothing remaining, another client's
// runs; a handler that fails gives its slot back.
func concurrency(t *testing.T, a Adapter) {
	gate := NewGate()
	send := a.Serve(t, Config{Algorithm: Concurrency, Max: 1, Expiration: time.Minute, KeyFromHeader: true, Gate: gate}, nil)
	held := make(chan Response, 1)
	go func() { held <- send(Request{Path: Hold, Key: "a"}) }()
	gate.Entered()
	r := send(Request{Key: "a"})
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "1", r.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, http.StatusOK, send(Request{Key: "b"}).Status, "another client")
	gate.Open()
	assert.Equal(t, http.StatusInternalServerError, (<-held).Status)
	for range 3 {
		assert.Equal(t, http.StatusInternalServerError, send(Request{Path: Boom, Key: "a"}).Status)
	}
	assert.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status, "the slots came back")
}

// Max 2 a minute, built with the adapter's NewLimiter: its controls see a
// client's state without counting, Reset readmits it, and Block holds it
// off with a Retry-After of the block's rest whatever its counts, while
// other clients go on; Reset lifts the block. Every algorithm.
func operators(t *testing.T, a Adapter) {
	ctx := context.Background()
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := &Clock{}
			var ops Controls
			send := a.Serve(t, Config{Algorithm: alg, Max: 2, Expiration: time.Minute, KeyFromHeader: true, Operate: func(c Controls) { ops = c }}, clock)
			require.NotNil(t, ops, "the adapter gave its controls")
			require.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status)
			for range 10 {
				st, err := ops.Peek(ctx, "a")
				require.NoError(t, err)
				assert.Equal(t, 1, st.Tightest().Remaining, "peeks count nothing")
			}
			require.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status)
			require.Equal(t, http.StatusTooManyRequests, send(Request{Key: "a"}).Status)
			st, err := ops.Peek(ctx, "a")
			require.NoError(t, err)
			assert.False(t, st.Allowed())
			assert.Positive(t, st.RetryAfter())
			assert.False(t, st.Blocked())

			require.NoError(t, ops.Reset(ctx, "a"))
			r := send(Request{Key: "a"})
			require.Equal(t, http.StatusOK, r.Status, "Reset readmits the client")
			assert.Equal(t, "1", r.Header.Get("X-RateLimit-Remaining"))

			st, err = ops.Block(ctx, "a", 30*time.Second)
			require.NoError(t, err)
			assert.True(t, st.Blocked())
			r = send(Request{Key: "a"})
			require.Equal(t, http.StatusTooManyRequests, r.Status, "blocked with quota left")
			assert.Equal(t, "30", r.Header.Get("Retry-After"))
			assert.Equal(t, "0", r.Header.Get("X-RateLimit-Remaining"))
			clock.Advance(10 * time.Second)
			assert.Equal(t, "20", send(Request{Key: "a"}).Header.Get("Retry-After"))
			assert.Equal(t, http.StatusOK, send(Request{Key: "b"}).Status, "another client")
			require.NoError(t, ops.Reset(ctx, "a"))
			assert.Equal(t, http.StatusOK, send(Request{Key: "a"}).Status, "Reset lifts the block")

			_, err = ops.Block(ctx, "a", 0)
			assert.ErrorContains(t, err, "limiter: Block: d is 0s")
			_, err = ops.Peek(ctx, "")
			assert.ErrorContains(t, err, "the key is empty")
		})
	}
}
