// Package headers writes the rate-limit fields of a decision on a response,
// the same for every middleware adapter: X-RateLimit-Limit, -Remaining and
// -Reset, the IETF RateLimit-Policy and RateLimit fields, and Retry-After.
// An adapter hands it its response's fields through Fields.
package headers

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/fiberlimit/limiter/quota"
)

// Mode chooses which rate-limit fields a response carries. Retry-After is
// sent with every rejection that can succeed later, in every mode.
type Mode uint8

// The modes; the adapters document them as their HeaderMode.
const (
	XRateLimit Mode = iota
	IETF
	Both
	None
)

// String returns the mode's name, as the adapters' constants have it
// without "Headers".
func (m Mode) String() string {
	switch m {
	case XRateLimit:
		return "XRateLimit"
	case IETF:
		return "IETF"
	case Both:
		return "Both"
	case None:
		return "None"
	}
	return "HeaderMode(" + strconv.Itoa(int(m)) + ")"
}

// Field names in the form fasthttp normalizes names to, as Fiber's c.Set
// stores them. HTTP field names are case-insensitive.
var (
	NameLimit      = []byte("X-Ratelimit-Limit")
	NameRemaining  = []byte("X-Ratelimit-Remaining")
	NameReset      = []byte("X-Ratelimit-Reset")
	NamePolicy     = []byte("Ratelimit-Policy")
	NameRateLimit  = []byte("Ratelimit")
	NameRetryAfter = []byte("Retry-After")
)

// defaultPolicyName names the policy of a limiter without PolicyName.
const defaultPolicyName = "default"

// Fields are a response's header fields as they stand. Peek returns a
// field's value, nil when absent; names are given in the form of the
// variables above.
type Fields interface {
	Peek(name []byte) []byte
}

// Out collects the fields a Writer sets, for the adapter to set on its
// response with calls of its own. Its zero value is ready. An adapter that
// hands the values to fasthttp takes one from AcquireOut: some fasthttp
// versions keep SetCanonical's value in their escape analysis, which would
// move an Out on the stack to the heap, one allocation per request.
type Out struct {
	n     int
	names [8][]byte
	// Values are kept as places in buf rather than as slices of it: a
	// struct that points into itself escapes to the heap.
	values [8]outValue
	used   int
	buf    [512]byte // room for the usual values
}

// outValue is where a value of an Out is: buf[off:off+n], or big when
// buf had no room for it.
type outValue struct {
	off, n int
	big    []byte
}

// outs are the Outs of AcquireOut.
var outs = sync.Pool{New: func() any { return new(Out) }}

// AcquireOut returns an empty Out, to give back with ReleaseOut once its
// fields are set.
func AcquireOut() *Out {
	o := outs.Get().(*Out)
	o.n, o.used = 0, 0
	return o
}

// ReleaseOut gives o back; it must not be used after.
func ReleaseOut(o *Out) { outs.Put(o) }

// Room is o's buffer, empty, for a value to be formatted in and set at
// once: a buffer on the stack would escape through fasthttp's SetCanonical.
func (o *Out) Room() []byte { return o.buf[:0] }

// Len is the number of fields set.
func (o *Out) Len() int { return o.n }

// Field returns field i: its name and value, valid while o is.
func (o *Out) Field(i int) (name, value []byte) { return o.names[i], o.value(i) }

func (o *Out) value(i int) []byte {
	if v := &o.values[i]; v.big == nil {
		return o.buf[v.off : v.off+v.n]
	}
	return o.values[i].big
}

// set sets field name to a copy of value. A field set twice is listed
// twice, the later value last: setting them in order leaves it.
func (o *Out) set(name, value []byte) {
	v := outValue{off: o.used, n: len(value)}
	if o.used+len(value) <= len(o.buf) {
		o.used += copy(o.buf[o.used:], value)
	} else {
		v.big = append([]byte{}, value...)
	}
	o.add(name, v)
}

// setInt sets field name to n in decimal, formatted in place.
func (o *Out) setInt(name []byte, n int64) {
	if o.used+20 > len(o.buf) {
		var tmp [20]byte
		o.set(name, strconv.AppendInt(tmp[:0], n, 10))
		return
	}
	start := o.used
	o.used = len(appendDecimal(o.buf[start:start], n)) + start
	o.add(name, outValue{off: start, n: o.used - start})
}

func (o *Out) add(name []byte, v outValue) {
	if o.n == len(o.names) { // never: a Writer sets at most 6 fields, Retry-After twice
		return
	}
	o.names[o.n], o.values[o.n] = name, v
	o.n++
}

// peek returns field name as it will be: as last set in o, else as it
// stands.
func (o *Out) peek(h Fields, name []byte) []byte {
	for i := o.n - 1; i >= 0; i-- {
		if bytes.Equal(o.names[i], name) {
			return o.value(i)
		}
	}
	return h.Peek(name)
}

// Config is what a Writer is built from: the adapter's header settings
// and its limits.
type Config struct {
	Mode           Mode
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
// IETF ones (Retry-After goes with a rejection in every mode).
func (w *Writer) Sets() (xRateLimit, ietf bool) { return w.xRateLimit, w.ietf }

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

// writeIETF sets RateLimit-Policy and RateLimit for res, scratch being
// spare room for the values; admitted says the request goes on (see
// setMember).
func (w *Writer) writeIETF(out *Out, h Fields, res *quota.Result, key string, scratch []byte, admitted bool) {
	p := scratch
	for i, d := range res.Decisions() {
		if i > 0 {
			p = append(p, ", "...)
		}
		p = append(p, w.names[i]...)
		p = append(p, ";q="...)
		p = strconv.AppendInt(p, int64(d.Limit), 10)
		p = append(p, ";w="...)
		p = strconv.AppendInt(p, max(1, timestep.Seconds(d.Window)), 10)
		if w.withKey {
			p = appendPartitionKey(p, key)
		}
	}
	setMember(out, h, NamePolicy, p, p[len(p):], admitted)
	p = scratch
	for i, d := range res.Decisions() {
		if i > 0 {
			p = append(p, ", "...)
		}
		// t is when more quota is available: for a limit that rejects the
		// request, when it would admit it, its own Retry-After (the field
		// may say later, for a limit or a limiter in front), so that
		// Retry-After is never earlier than t; otherwise when the quota is
		// fully back.
		t := timestep.Seconds(d.ResetAfter)
		if d.RetryAfter > 0 && d.RetryAfter != quota.Never {
			t = max(1, timestep.Seconds(d.RetryAfter))
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
	setMember(out, h, NameRateLimit, p, p[len(p):], admitted)
}

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

// setMember sets field to members, this limiter's policies, or adds them
// to the policies the field already lists (of other limiters), so that a
// client sees every policy it is under. They go first when the request was
// admitted: the policies there are those of limiters behind this one, which
// wrote theirs before (a limiter of another kind in front writes before the
// handler, and then comes after); last on a rejection, after those of
// limiters in front. scratch is spare room for the joined value.
func setMember(out *Out, h Fields, field, members, scratch []byte, admitted bool) {
	prev := out.peek(h, field)
	if len(prev) == 0 {
		out.set(field, members)
		return
	}
	var joined []byte
	if admitted {
		joined = append(append(append(scratch, members...), ", "...), prev...)
	} else {
		joined = append(append(append(scratch, prev...), ", "...), members...)
	}
	out.set(field, joined)
}

// appendPartitionKey appends the pk parameter: key as an RFC 9651 Byte
// Sequence, base64 between colons; a key longer than maxPartitionKey
// bytes as its SHA-256 digest, so that a client's long key does not make
// the response's fields as long.
func appendPartitionKey(dst []byte, key string) []byte {
	dst = append(dst, ";pk=:"...)
	if len(key) > maxPartitionKey {
		sum := sha256.Sum256([]byte(key))
		dst = base64.StdEncoding.AppendEncode(dst, sum[:])
	} else {
		dst = base64.StdEncoding.AppendEncode(dst, []byte(key))
	}
	return append(dst, ':')
}

// maxPartitionKey is the longest key pk carries as it is: 64 bytes, 88 in
// base64.
const maxPartitionKey = 64

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

// RetryAfterValue is a Retry-After value for a wait: whole seconds,
// rounded up, at least 1.
func RetryAfterValue(dst []byte, wait time.Duration) []byte {
	return strconv.AppendInt(dst, max(1, timestep.Seconds(wait)), 10)
}
