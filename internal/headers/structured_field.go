package headers

import "bytes"

// exhaustedMembers returns the largest t among the members of a RateLimit
// field (an RFC 9651 List of Items with parameters) whose r is 0, leaving
// out members named in self (RFC 9651 Strings with their quotes). It reads
// the list as far as it is well formed and no further.
func exhaustedMembers(field []byte, self [][]byte) int64 {
	var wait int64
	p := sfParser{b: field}
	for p.skipSpace(); !p.done(); {
		name, ok := p.bareItem()
		if !ok {
			return wait
		}
		r, t := int64(-1), int64(0)
		for p.skipByte(';') {
			p.skipSpace()
			k, ok := p.key()
			if !ok {
				return wait
			}
			if !p.skipByte('=') {
				continue // a boolean parameter
			}
			v, isInt, ok := p.bareValue()
			if !ok {
				return wait
			}
			if isInt && len(k) == 1 && k[0] == 'r' {
				r = v
			} else if isInt && len(k) == 1 && k[0] == 't' {
				t = v
			}
		}
		if r == 0 && !isOneOf(name, self) {
			wait = max(wait, t)
		}
		p.skipSpace()
		if !p.skipByte(',') {
			return wait
		}
		p.skipSpace()
	}
	return wait
}

// sfParser reads the few RFC 9651 pieces a RateLimit field is made of.
type sfParser struct {
	b []byte
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.b) }

func (p *sfParser) skipSpace() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t') {
		p.i++
	}
}

// skipByte consumes c if it comes next.
func (p *sfParser) skipByte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// bareItem consumes a String (returned with its quotes) or a Token, an
// Integer or another run of bytes up to a parameter or the next member.
func (p *sfParser) bareItem() ([]byte, bool) {
	start := p.i
	if p.skipByte('"') {
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '\\':
				p.i += 2
				continue
			case '"':
				p.i++
				return p.b[start:p.i], true
			}
			p.i++
		}
		return nil, false
	}
	for p.i < len(p.b) && p.b[p.i] != ';' && p.b[p.i] != ',' && p.b[p.i] != ' ' {
		p.i++
	}
	return p.b[start:p.i], p.i > start
}

// key consumes a parameter's key: lowercase letters, digits, '_', '-',
// '.' and '*'.
func (p *sfParser) key() ([]byte, bool) {
	start := p.i
	for p.i < len(p.b) && isKeyByte(p.b[p.i]) {
		p.i++
	}
	return p.b[start:p.i], p.i > start
}

// isKeyByte reports whether c may be part of a parameter's key.
func isKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*'
}

// bareValue consumes a parameter's value; isInt tells whether it is a
// non-negative Integer, whose value v then is.
func (p *sfParser) bareValue() (v int64, isInt, ok bool) {
	item, ok := p.bareItem()
	if !ok {
		return 0, false, false
	}
	v, isInt = ParseSeconds(item)
	return v, isInt, true
}

// ParseSeconds reads b as a non-negative decimal integer of at most 15
// digits, as RFC 9651 Integers and delta-seconds (Retry-After) are.
func ParseSeconds(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// isOneOf reports whether name is one of names.
func isOneOf(name []byte, names [][]byte) bool {
	for _, n := range names {
		if bytes.Equal(name, n) {
			return true
		}
	}
	return false
}
