package headers

import (
	"bytes"
	"strconv"
	"sync"
)

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
	o.used = len(AppendDecimal(o.buf[start:start], n)) + start
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
