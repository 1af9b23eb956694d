package headers

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"

	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/fiberlimit/limiter/quota"
)

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
