package headers

import (
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
)

// ExhaustedInFront returns how many seconds a limiter in front of this one
// (another handler of the chain, which admitted the request) says its
// quota stays spent, or 0: the largest t of a RateLimit member with r=0
// other than those named in self (the policies this limiter is about to
// write; none when it writes none), and X-RateLimit-Reset when
// X-RateLimit-Remaining is 0. Those say when the front limiter's quota is
// fully back: a retry before then may be rejected there (with a fixed
// window in front it would be; with a token bucket or sliding window in
// front it may pass sooner, so the bound is on the safe side). Retry-After
// is never earlier, and so never earlier than any t with r=0 the response
// lists. Values it cannot read are passed over.
func ExhaustedInFront(h Fields, self [][]byte) int64 {
	wait := exhaustedMembers(h.Peek(NameRateLimit), self)
	if remaining := h.Peek(NameRemaining); len(remaining) == 1 && remaining[0] == '0' {
		if reset, ok := ParseSeconds(h.Peek(NameReset)); ok {
			wait = max(wait, reset)
		}
	}
	return wait
}

// FailClosedRetryAfter appends to dst the Retry-After value of
// FailClosed's 503, whose wait is the breaker's cool-down: whole seconds,
// rounded up, at least 1, and no earlier than a limiter in front says its
// quota is back (ExhaustedInFront of the response's fields h).
func FailClosedRetryAfter(dst []byte, h Fields, wait time.Duration) []byte {
	if front := ExhaustedInFront(h, nil); front > int64(wait/time.Second) {
		return strconv.AppendInt(dst, front, 10)
	}
	return strconv.AppendInt(dst, max(1, timestep.Seconds(wait)), 10)
}
