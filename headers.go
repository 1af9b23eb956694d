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
	withKey    bool // the IETF fields carry the key as pk
	alg        algorithm
	n          int               // limits
	names      [maxLimits][]byte // the limits' policy names as RFC 9651 Strings, quotes included
	limits     [maxLimits][]byte // each limit's X-RateLimit-Limit when it never changes (no MaxFunc)
	policy     []byte            // RateLimit-Policy's value when it never changes (no MaxFunc, no pk)
}

// newHeaderWriter validates the header settings of cfg (defaults applied)
// and prepares what never changes: the policy names of the limits ls, and
// when constant (no MaxFunc) the Limit and the policy.
func newHeaderWriter(cfg Config, alg algorithm, ls *limits, constant bool) headerWriter {
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
		alg:        alg,
		n:          ls.n,
	}
	if !w.ietf {
		set := ""
		switch {
		case cfg.PolicyName != "":
			set = "PolicyName"
		case cfg.HeaderPartitionKey:
			set = "HeaderPartitionKey"
		}
		for i, l := range cfg.Limits {
			if l.PolicyName != "" {
				set = fmt.Sprintf("Limits[%d].PolicyName", i)
			}
		}
		if set != "" {
			panic(fmt.Sprintf("limiter: %s is set but Headers is %v; PolicyName and HeaderPartitionKey apply to the IETF headers only (HeadersIETF or HeadersBoth)", set, mode))
		}
	}
	base := cfg.PolicyName
	if base == "" {
		base = defaultPolicyName
	}
	windows := windowsOf(&cfg)
	for i := range ls.n {
		name := base
		if len(cfg.Limits) > 1 {
			name = string(appendWindow([]byte(base+"-"), windows[i]))
			if cfg.Limits[i].PolicyName != "" {
				name = cfg.Limits[i].PolicyName
			}
		} else if len(cfg.Limits) == 1 && cfg.Limits[0].PolicyName != "" {
			name = cfg.Limits[0].PolicyName
		}
		for j := 0; j < len(name); j++ {
			if name[j] < 0x20 || name[j] > 0x7e {
				panic(fmt.Sprintf("limiter: PolicyName %q has byte 0x%02x at %d; it must be printable ASCII (an RFC 9651 String)", name, name[j], j))
			}
		}
		w.names[i] = appendSFString(nil, name)
		for j := range i {
			if bytes.Equal(w.names[i], w.names[j]) {
				panic(fmt.Sprintf("limiter: Limits[%d] and Limits[%d] have the same PolicyName %q; give each limit its own", j, i, name))
			}
		}
	}
	if constant {
		for i := range ls.n {
			w.limits[i] = strconv.AppendInt(nil, quota(alg, ls.r[i]), 10)
		}
		if !w.withKey {
			for i := range ls.n {
				if i > 0 {
					w.policy = append(w.policy, ", "...)
				}
				w.policy = w.appendPolicy(w.policy, i, ls.r[i], "")
			}
		}
	}
	return w
}

// quota is the Limit of a decision under r: the bucket's capacity for the
// token bucket, else the limit.
func quota(alg algorithm, r rule) int64 {
	if alg == algToken {
		return r.burst
	}
	return r.limit
}

// policyWindow is the w of the IETF RateLimit-Policy for rule r: the
// window, or for the token bucket the time an empty bucket takes to fill.
func policyWindow(alg algorithm, r rule) time.Duration {
	steps := r.window
	if alg == algToken && r.burst != r.limit {
		steps = ceilDiv(r.burst*r.window, r.limit) // burst*window is within 2^51
	}
	return r.span(steps)
}

// rejectedBehind is the request's user value that says a limiter behind
// this one (later in the chain) rejected the request: with 429, or with
// FailClosed's 503. A limiter in front then leaves that limiter's
// X-RateLimit fields and Retry-After as they are (see writeAdmitted).
type rejectedBehind struct{}

// write sets the headers of the mode for v, the decision on key under ls,
// and Retry-After (whole seconds, at least 1) on a rejection that can
// succeed later, unless dryRun: the request then goes on as admitted. The
// X-RateLimit fields describe the most restrictive limit; the IETF fields
// list each. A rejection's headers are written before LimitReached runs,
// an admitted request's once the handler has run (writeAdmitted), so that
// a handler that replaces the response (proxy.Forward) does not lose them.
func (w *headerWriter) write(c *fiber.Ctx, v *verdict, key string, ls *limits, dryRun bool) {
	var buf [256]byte // room for the usual values without allocating; longer names or a pk of a long key grow it
	h := &c.Response().Header
	retryAfter := v.retryAfter()
	retry := !v.allowed() && retryAfter != InfDuration
	var wait int64 // Retry-After's value, read before this limiter's fields replace those of a limiter in front
	if retry {
		var self [][]byte // the policies this limiter writes, which it replaces
		if w.ietf {
			self = w.names[:w.n]
		}
		wait = max(1, ceilSeconds(retryAfter), exhaustedInFront(h, self))
	}
	if w.xRateLimit {
		w.writeX(h, v, buf[:0])
	}
	if w.ietf {
		w.writeIETF(h, v, key, ls, buf[:0], v.allowed() || dryRun)
	}
	if retry && !dryRun {
		h.SetCanonical(headerRetryAfter, strconv.AppendInt(buf[:0], wait, 10))
	}
}

// writeAdmitted sets the headers of an admitted request (or one DryRun let
// through) once the handler has run, so that they describe the state after
// any refund and survive a handler that replaced the response; they replace
// any X-RateLimit fields the handler set, as in Fiber. When a limiter of
// this package behind this one rejected the request, its fields stand:
// this limiter adds its policies to the IETF lists, and its X-RateLimit
// fields only if that limiter wrote none. And when something behind this
// limiter rejected the request with a Retry-After (a limiter of any kind,
// an upstream's 429 or 503), a limit of this one that is spent makes it no
// earlier than that limit's quota is back: a retry sooner would be
// rejected here.
func (w *headerWriter) writeAdmitted(c *fiber.Ctx, v *verdict, key string, ls *limits, dryRun bool) {
	h := &c.Response().Header
	if c.Context().UserValue(rejectedBehind{}) == nil {
		w.write(c, v, key, ls, dryRun)
	} else {
		var buf [256]byte
		if w.xRateLimit && len(h.PeekBytes(headerLimit)) == 0 {
			w.writeX(h, v, buf[:0])
		}
		if w.ietf {
			w.writeIETF(h, v, key, ls, buf[:0], true)
		}
	}
	if spent := v.spentFor(); spent > 0 && !dryRun {
		if prev, ok := parseSeconds(h.PeekBytes(headerRetryAfter)); ok && prev < spent {
			var buf [20]byte
			h.SetCanonical(headerRetryAfter, strconv.AppendInt(buf[:0], spent, 10))
		}
	}
}

// writeX sets the X-RateLimit fields of v's most restrictive limit,
// scratch being spare room for the values.
func (w *headerWriter) writeX(h *fasthttp.ResponseHeader, v *verdict, scratch []byte) {
	i := v.tightest()
	d := &v.each[i]
	if w.limits[i] != nil {
		h.SetCanonical(headerLimit, w.limits[i])
	} else {
		h.SetCanonical(headerLimit, strconv.AppendInt(scratch, int64(d.Limit), 10))
	}
	h.SetCanonical(headerRemaining, strconv.AppendInt(scratch, int64(d.Remaining), 10))
	h.SetCanonical(headerReset, strconv.AppendInt(scratch, ceilSeconds(d.ResetAfter), 10))
}

// writeIETF sets RateLimit-Policy and RateLimit for v, scratch being spare
// room for the values; admitted says the request goes on (see setMember).
func (w *headerWriter) writeIETF(h *fasthttp.ResponseHeader, v *verdict, key string, ls *limits, scratch []byte, admitted bool) {
	if w.policy != nil {
		w.setMember(h, headerPolicy, w.policy, scratch, admitted)
	} else {
		p := scratch
		for i := range w.n {
			if i > 0 {
				p = append(p, ", "...)
			}
			p = w.appendPolicy(p, i, ls.r[i], key)
		}
		w.setMember(h, headerPolicy, p, p[len(p):], admitted)
	}
	p := scratch
	for i := range w.n {
		if i > 0 {
			p = append(p, ", "...)
		}
		d := &v.each[i]
		// t is when more quota is available: for a limit that rejects the
		// request, when it would admit it, its own Retry-After (the header
		// may say later, for a limit or a limiter in front), so that
		// Retry-After is never earlier than t; otherwise when the quota is
		// fully back.
		t := ceilSeconds(d.ResetAfter)
		if d.RetryAfter > 0 && d.RetryAfter != InfDuration {
			t = max(1, ceilSeconds(d.RetryAfter))
		}
		p = append(p, w.names[i]...)
		p = append(p, ";r="...)
		p = strconv.AppendInt(p, int64(d.Remaining), 10)
		p = append(p, ";t="...)
		p = strconv.AppendInt(p, t, 10)
		if w.withKey {
			p = appendPartitionKey(p, key)
		}
	}
	w.setMember(h, headerRateLimit, p, p[len(p):], admitted)
}

// exhaustedInFront returns how many seconds a limiter in front of this one
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
func exhaustedInFront(h *fasthttp.ResponseHeader, self [][]byte) int64 {
	wait := exhaustedMembers(h.PeekBytes(headerRateLimit), self)
	if remaining := h.PeekBytes(headerRemaining); len(remaining) == 1 && remaining[0] == '0' {
		if reset, ok := parseSeconds(h.PeekBytes(headerReset)); ok {
			wait = max(wait, reset)
		}
	}
	return wait
}

// setMember sets field to members, this limiter's policies, or adds them
// to the policies the field already lists (of other limiters), so that a
// client sees every policy it is under. They go first when the request was
// admitted: the policies there are those of limiters behind this one, which
// wrote theirs before (a limiter of another kind in front writes before the
// handler, and then comes after); last on a rejection, after those of
// limiters in front. scratch is spare room for the joined value.
func (w *headerWriter) setMember(h *fasthttp.ResponseHeader, field, members, scratch []byte, admitted bool) {
	prev := h.PeekBytes(field)
	if len(prev) == 0 {
		h.SetCanonical(field, members)
		return
	}
	var joined []byte
	if admitted {
		joined = append(append(append(scratch, members...), ", "...), prev...)
	} else {
		joined = append(append(append(scratch, prev...), ", "...), members...)
	}
	h.SetCanonical(field, joined)
}

// appendPolicy appends a RateLimit-Policy member for limit i under rule r:
// the policy's name, its quota q and window w (whole seconds, at least 1),
// and the key as pk when the writer carries it.
func (w *headerWriter) appendPolicy(dst []byte, i int, r rule, key string) []byte {
	dst = append(dst, w.names[i]...)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, quota(w.alg, r), 10)
	dst = append(dst, ";w="...)
	dst = strconv.AppendInt(dst, max(1, ceilSeconds(policyWindow(w.alg, r))), 10)
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
