package limiter

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// HeaderMode chooses which rate-limit headers a response carries.
// Retry-After is sent with every rejection that can succeed later, in every
// mode.
type HeaderMode uint8

const (
	// HeadersXRateLimit sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, as Fiber's limiter does. The default.
	HeadersXRateLimit HeaderMode = iota
	// HeadersIETF sends RateLimit-Policy and RateLimit, the fields of
	// draft-ietf-httpapi-ratelimit-headers-10, for example
	// `RateLimit-Policy: "default";q=100;w=60` and
	// `RateLimit: "default";r=42;t=17`.
	HeadersIETF
	// HeadersBoth sends both sets.
	HeadersBoth
	// HeadersNone sends no rate-limit headers (Retry-After still goes with
	// a rejection). DisableHeaders: true means the same.
	HeadersNone
)

// String returns the mode's name, as in the constants without "Headers".
func (m HeaderMode) String() string {
	switch m {
	case HeadersXRateLimit:
		return "XRateLimit"
	case HeadersIETF:
		return "IETF"
	case HeadersBoth:
		return "Both"
	case HeadersNone:
		return "None"
	}
	return "HeaderMode(" + strconv.Itoa(int(m)) + ")"
}

// Header names in the form fasthttp normalizes names to, as Fiber's c.Set
// would store them, so that SetCanonical (which does not normalize) stores
// them where c.GetRespHeader, c.Set and Header.Del look for them. HTTP
// header names are case-insensitive.
var (
	headerLimit       = []byte("X-Ratelimit-Limit")
	headerRemaining   = []byte("X-Ratelimit-Remaining")
	headerReset       = []byte("X-Ratelimit-Reset")
	headerPolicy      = []byte("Ratelimit-Policy")
	headerRateLimit   = []byte("Ratelimit")
	headerRetryAfter  = []byte(fiber.HeaderRetryAfter)
	defaultPolicyName = "default"
)

// headerWriter sets the rate-limit headers of a decision on the response.
type headerWriter struct {
	xRateLimit bool
	ietf       bool
	withKey    bool   // the IETF fields carry the key as pk
	limit      []byte // X-RateLimit-Limit's value when it never changes (no MaxFunc)
	name       []byte // the policy name as an RFC 9651 String, quotes included
	policy     []byte // RateLimit-Policy's value when it never changes (no MaxFunc, no pk)
}

// newHeaderWriter validates the header settings of cfg (defaults applied)
// and prepares what never changes. constLimit is the Limit of every
// decision when there is no MaxFunc, else 0; policyWindow is then the
// policy's w.
func newHeaderWriter(cfg Config, constLimit int64, policyWindow time.Duration) headerWriter {
	mode := cfg.Headers
	if cfg.DisableHeaders {
		if mode != HeadersXRateLimit && mode != HeadersNone {
			panic(fmt.Sprintf("limiter: DisableHeaders is true but Headers is %v; set only Headers (HeadersNone)", mode))
		}
		mode = HeadersNone
	}
	if mode > HeadersNone {
		panic(fmt.Sprintf("limiter: Headers is %d; it must be HeadersXRateLimit, HeadersIETF, HeadersBoth or HeadersNone", mode))
	}
	w := headerWriter{
		xRateLimit: mode == HeadersXRateLimit || mode == HeadersBoth,
		ietf:       mode == HeadersIETF || mode == HeadersBoth,
		withKey:    cfg.HeaderPartitionKey,
	}
	if !w.ietf && (cfg.PolicyName != "" || cfg.HeaderPartitionKey) {
		panic(fmt.Sprintf("limiter: PolicyName or HeaderPartitionKey is set but Headers is %v; they apply to the IETF headers only (HeadersIETF or HeadersBoth)", mode))
	}
	name := cfg.PolicyName
	if name == "" {
		name = defaultPolicyName
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			panic(fmt.Sprintf("limiter: PolicyName %q has byte 0x%02x at %d; it must be printable ASCII (an RFC 9651 String)", name, name[i], i))
		}
	}
	w.name = appendSFString(nil, name)
	if constLimit > 0 {
		w.limit = strconv.AppendInt(nil, constLimit, 10)
		if !w.withKey {
			w.policy = w.appendPolicy(nil, constLimit, policyWindow, "")
		}
	}
	return w
}

// write sets the headers of the mode for d, the decision on key under a
// policy of w seconds, and Retry-After (whole seconds, at least 1) on a
// rejection that can succeed later, unless dryRun: the request then goes on
// as admitted.
func (w *headerWriter) write(c *fiber.Ctx, d Decision, key string, policyWindow time.Duration, dryRun bool) {
	var buf [256]byte // the longest value, RateLimit-Policy with a 100-byte name, fits; pk of a long key may not
	h := &c.Response().Header
	retry := !d.Allowed && d.RetryAfter != InfDuration
	var wait int64 // Retry-After's value, read before this limiter's fields replace those of a limiter in front
	if retry {
		var self []byte // the policy this limiter writes, which it replaces
		if w.ietf {
			self = w.name
		}
		wait = max(1, ceilSeconds(d.RetryAfter), exhaustedInFront(h, self))
	}
	if w.xRateLimit {
		if w.limit != nil {
			h.SetCanonical(headerLimit, w.limit)
		} else {
			h.SetCanonical(headerLimit, strconv.AppendInt(buf[:0], int64(d.Limit), 10))
		}
		h.SetCanonical(headerRemaining, strconv.AppendInt(buf[:0], int64(d.Remaining), 10))
		h.SetCanonical(headerReset, strconv.AppendInt(buf[:0], ceilSeconds(d.ResetAfter), 10))
	}
	if w.ietf {
		if w.policy != nil {
			w.setMember(h, headerPolicy, w.policy, buf[:0])
		} else {
			v := w.appendPolicy(buf[:0], int64(d.Limit), policyWindow, key)
			w.setMember(h, headerPolicy, v, v[len(v):])
		}
		// t is when more quota is available: on a rejection, when this
		// request would be admitted, this limiter's own Retry-After (the
		// header may say later, for a limiter in front), so that
		// Retry-After is never earlier than t; otherwise when the quota is
		// fully back.
		t := ceilSeconds(d.ResetAfter)
		if retry {
			t = max(1, ceilSeconds(d.RetryAfter))
		}
		v := append(buf[:0], w.name...)
		v = append(v, ";r="...)
		v = strconv.AppendInt(v, int64(d.Remaining), 10)
		v = append(v, ";t="...)
		v = strconv.AppendInt(v, t, 10)
		if w.withKey {
			v = appendPartitionKey(v, key)
		}
		w.setMember(h, headerRateLimit, v, v[len(v):])
	}
	if retry && !dryRun {
		h.SetCanonical(headerRetryAfter, strconv.AppendInt(buf[:0], wait, 10))
	}
}

// exhaustedInFront returns how many seconds a limiter in front of this one
// (another handler of the chain, which admitted the request) says its
// quota stays spent, or 0: the largest t of a RateLimit member with r=0
// other than one named self (the policy this limiter is about to write;
// nil when it writes none), and X-RateLimit-Reset when
// X-RateLimit-Remaining is 0. Those say when the front limiter's quota is
// fully back: a retry before then may be rejected there (with a fixed
// window in front it would be; with a token bucket or sliding window in
// front it may pass sooner, so the bound is on the safe side). Retry-After
// is never earlier, and so never earlier than any t with r=0 the response
// lists. Values it cannot read are passed over.
func exhaustedInFront(h *fasthttp.ResponseHeader, self []byte) int64 {
	wait := exhaustedMembers(h.PeekBytes(headerRateLimit), self)
	if remaining := h.PeekBytes(headerRemaining); len(remaining) == 1 && remaining[0] == '0' {
		if reset, ok := parseSeconds(h.PeekBytes(headerReset)); ok {
			wait = max(wait, reset)
		}
	}
	return wait
}

// setMember sets field to member, this limiter's policy, unless the field
// already lists other policies (another limiter in front of this one, with
// another PolicyName): member is then added to the list, so that a client
// sees every policy it is under. A field already naming this policy (as
// when the same handler runs twice) is replaced. scratch is spare room for
// the joined value.
func (w *headerWriter) setMember(h *fasthttp.ResponseHeader, field, member, scratch []byte) {
	prev := h.PeekBytes(field)
	if len(prev) == 0 || bytes.HasPrefix(prev, w.name) && (len(prev) == len(w.name) || prev[len(w.name)] == ';') {
		h.SetCanonical(field, member)
		return
	}
	joined := append(append(append(scratch, prev...), ", "...), member...)
	h.SetCanonical(field, joined)
}

// appendPolicy appends a RateLimit-Policy value: the policy's name, its
// quota q and window w (whole seconds, at least 1), and the key as pk when
// the writer carries it.
func (w *headerWriter) appendPolicy(dst []byte, quota int64, window time.Duration, key string) []byte {
	dst = append(dst, w.name...)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, quota, 10)
	dst = append(dst, ";w="...)
	dst = strconv.AppendInt(dst, max(1, ceilSeconds(window)), 10)
	if w.withKey {
		dst = appendPartitionKey(dst, key)
	}
	return dst
}

// appendPartitionKey appends the pk parameter: key as an RFC 9651 Byte
// Sequence, base64 between colons.
func appendPartitionKey(dst []byte, key string) []byte {
	dst = append(dst, ";pk=:"...)
	dst = base64.StdEncoding.AppendEncode(dst, []byte(key))
	return append(dst, ':')
}

// appendSFString appends s, printable ASCII, as an RFC 9651 String: in
// double quotes, with " and \ escaped by a backslash.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// ceilSeconds rounds a non-negative duration up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	n := int64(d / time.Second)
	if d%time.Second != 0 {
		n++
	}
	return n
}
