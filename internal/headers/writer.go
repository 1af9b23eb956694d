// Package headers writes the rate-limit fields of a decision on a response,
// the same for every middleware adapter: X-RateLimit-Limit, -Remaining and
// -Reset, the IETF RateLimit-Policy and RateLimit fields, and Retry-After.
// An adapter hands it its response's fields through Fields.
package headers

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/fiberlimit/limiter/quota"
)

// Config is what a Writer is built from: the adapter's header settings
// and its limits.
type Config struct {
	Mode Mode
	// DisableHeaders: no field at all, Retry-After included (Fiber's
	// meaning); Mode None keeps Retry-After on a rejection.
	DisableHeaders bool
	PartitionKey   bool   // HeaderPartitionKey: the IETF fields carry the key as pk
	PolicyName     string // "" for "default"
	// Limits are the windows and policy names of the adapter's
	// Config.Limits, in order; nil for a single Max per Expiration.
	Limits []Limit
	// Quotas are the values X-RateLimit-Limit takes but under MaxFunc:
	// each limit's Max and Burst. The Writer keeps their decimal forms.
	Quotas []int
}

// Limit is one entry of Config.Limits.
type Limit struct {
	Expiration time.Duration
	PolicyName string
}

// Writer sets the rate-limit fields of a decision.
type Writer struct {
	xRateLimit bool
	ietf       bool
	retryAfter bool     // Retry-After goes with a rejection (all but DisableHeaders)
	withKey    bool     // the IETF fields carry the key as pk
	names      [][]byte // the limits' policy names as RFC 9651 Strings, quotes included
	quotas     []quotaText
}

// quotaText is a quota and its decimal form, whose capacity ends with it.
type quotaText struct {
	n    int64
	text []byte
}

// New checks cfg and returns its Writer; the error names the field that is
// wrong.
func New(cfg Config) (*Writer, error) {
	mode := cfg.Mode
	if cfg.DisableHeaders {
		if mode != XRateLimit && mode != None {
			return nil, fmt.Errorf("limiter: DisableHeaders is true but Headers is %v; set only Headers (HeadersNone)", mode)
		}
		mode = None
	}
	if mode > None {
		return nil, fmt.Errorf("limiter: Headers is %d; it must be HeadersXRateLimit, HeadersIETF, HeadersBoth or HeadersNone", mode)
	}
	w := &Writer{
		xRateLimit: mode == XRateLimit || mode == Both,
		ietf:       mode == IETF || mode == Both,
		retryAfter: !cfg.DisableHeaders,
		withKey:    cfg.PartitionKey,
	}
	for _, q := range cfg.Quotas {
		if _, small := Decimal(int64(q)); !small && !slices.ContainsFunc(w.quotas, func(t quotaText) bool { return t.n == int64(q) }) {
			text := strconv.AppendInt(nil, int64(q), 10)
			w.quotas = append(w.quotas, quotaText{int64(q), text[:len(text):len(text)]})
		}
	}
	if !w.ietf {
		set := ""
		switch {
		case cfg.PolicyName != "":
			set = "PolicyName"
		case cfg.PartitionKey:
			set = "HeaderPartitionKey"
		}
		for i, l := range cfg.Limits {
			if l.PolicyName != "" {
				set = fmt.Sprintf("Limits[%d].PolicyName", i)
			}
		}
		if set != "" {
			return nil, fmt.Errorf("limiter: %s is set but Headers is %v; PolicyName and HeaderPartitionKey apply to the IETF headers only (HeadersIETF or HeadersBoth)", set, mode)
		}
	}
	base := cfg.PolicyName
	if base == "" {
		base = defaultPolicyName
	}
	n := max(1, len(cfg.Limits))
	for i := range n {
		name := base
		if len(cfg.Limits) > 1 {
			name = string(timestep.AppendWindow([]byte(base+"-"), timestep.Millis(cfg.Limits[i].Expiration)))
		}
		if len(cfg.Limits) > 0 && cfg.Limits[i].PolicyName != "" {
			name = cfg.Limits[i].PolicyName
		}
		for j := 0; j < len(name); j++ {
			if name[j] < 0x20 || name[j] > 0x7e {
				return nil, fmt.Errorf("limiter: PolicyName %q has byte 0x%02x at %d; it must be printable ASCII (an RFC 9651 String)", name, name[j], j)
			}
		}
		w.names = append(w.names, appendSFString(nil, name))
		for j := range i {
			if bytes.Equal(w.names[i], w.names[j]) {
				return nil, fmt.Errorf("limiter: Limits[%d] and Limits[%d] have the same PolicyName %q; give each limit its own", j, i, name)
			}
		}
	}
	return w, nil
}

// Plain reports whether WriteAdmitted, for res admitted with no limiter
// behind that rejected, writes the three X-RateLimit fields and nothing
// else, and if so gives their values, for an adapter to set without an
// Out: the X-RateLimit mode alone, one limit, and some of it left (else a
// Retry-After may be due).
func (w *Writer) Plain(res *quota.Result) (limit, remaining, reset int64, ok bool) {
	if !w.xRateLimit || w.ietf || !res.Allowed() {
		return 0, 0, 0, false
	}
	ds := res.Decisions()
	if len(ds) != 1 || ds[0].Remaining == 0 {
		return 0, 0, 0, false
	}
	d := &ds[0]
	return int64(d.Limit), int64(d.Remaining), timestep.Seconds(d.ResetAfter), true
}

// Text returns n in decimal without formatting it, from the table of
// Decimal or from the quotas the Writer was built with; ok is false for
// any other number. The slice must not be changed.
func (w *Writer) Text(n int64) (text []byte, ok bool) {
	if text, ok := Decimal(n); ok {
		return text, true
	}
	for _, q := range w.quotas {
		if q.n == n {
			return q.text, true
		}
	}
	return nil, false
}

// Sets reports which rate-limit fields w sets: the X-RateLimit ones, the
// IETF ones (Retry-After goes with a rejection in every mode, unless
// DisableHeaders).
func (w *Writer) Sets() (xRateLimit, ietf bool) { return w.xRateLimit, w.ietf }

// Silent reports whether w sets no field at all (DisableHeaders): not even
// Retry-After, on a 429 or on FailClosed's 503.
func (w *Writer) Silent() bool { return !w.retryAfter }

// WithKey reports whether the fields carry the key (HeaderPartitionKey):
// the adapter must then keep a copy of the key for the fields written
// after the handler.
func (w *Writer) WithKey() bool { return w.withKey }

// Write sets, in out, the fields of the mode for res, the decision on key, and
// Retry-After (whole seconds, at least 1) on a rejection that can succeed
// later, unless dryRun: the request then goes on as admitted. The
// X-RateLimit fields describe the most restrictive limit; the IETF fields
// list each. A rejection's fields are written before the adapter's
// LimitReached runs, an admitted request's once the handler has run
// (WriteAdmitted), so that a handler that replaces the response
// (proxy.Forward) does not lose them.
func (w *Writer) Write(out *Out, h Fields, res *quota.Result, key string, dryRun bool) {
	var buf [256]byte // room for the usual values without allocating; longer names or a pk of a long key grow it
	if !w.retryAfter {
		return // DisableHeaders
	}
	retryAfter := res.RetryAfter()
	retry := !res.Allowed() && retryAfter != quota.Never
	var wait int64 // Retry-After's value, read before this limiter's fields replace those of a limiter in front
	if retry {
		var self [][]byte // the policies this limiter writes, which it replaces
		if w.ietf {
			self = w.names
		}
		wait = max(1, timestep.Seconds(retryAfter), ExhaustedInFront(h, self))
	}
	if w.xRateLimit {
		w.writeX(out, res)
	}
	if w.ietf {
		w.writeIETF(out, h, res, key, buf[:0], res.Allowed() || dryRun)
	}
	if retry && !dryRun {
		out.setInt(NameRetryAfter, wait)
	}
}

// WriteAdmitted sets, in out, the fields of an admitted request (or one DryRun let
// through) once the handler has run, so that they describe the state
// after any refund and survive a handler that replaced the response; they
// replace any X-RateLimit fields the handler set, as in Fiber. When a
// limiter of this module behind this one rejected the request
// (rejectedBehind), its fields stand: this limiter adds its policies to
// the IETF lists, and its X-RateLimit fields only if that limiter wrote
// none. And when something behind this limiter rejected the request with a
// Retry-After (a limiter of any kind, an upstream's 429 or 503), a limit
// of this one that is spent makes it no earlier than that limit's quota is
// back: a retry sooner would be rejected here.
func (w *Writer) WriteAdmitted(out *Out, h Fields, res *quota.Result, key string, dryRun, rejectedBehind bool) {
	if !w.retryAfter {
		return // DisableHeaders
	}
	if !rejectedBehind {
		w.Write(out, h, res, key, dryRun)
	} else {
		var buf [256]byte
		if w.xRateLimit && len(h.Peek(NameLimit)) == 0 {
			w.writeX(out, res)
		}
		if w.ietf {
			w.writeIETF(out, h, res, key, buf[:0], true)
		}
	}
	if spent := spentFor(res); spent > 0 && !dryRun {
		if prev, ok := ParseSeconds(out.peek(h, NameRetryAfter)); ok && prev < spent {
			out.setInt(NameRetryAfter, spent)
		}
	}
}

// spentFor is how many whole seconds the limits with nothing left need to
// have their quota fully back (the longest), or 0 when none is spent.
func spentFor(res *quota.Result) int64 {
	var spent int64
	for _, d := range res.Decisions() {
		if d.Remaining == 0 {
			spent = max(spent, timestep.Seconds(d.ResetAfter))
		}
	}
	return spent
}

// writeX sets the X-RateLimit fields of res's most restrictive limit.
func (w *Writer) writeX(out *Out, res *quota.Result) {
	d := res.Tightest()
	out.setInt(NameLimit, int64(d.Limit))
	out.setInt(NameRemaining, int64(d.Remaining))
	out.setInt(NameReset, timestep.Seconds(d.ResetAfter))
}
