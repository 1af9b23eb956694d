// Package clientaddr turns a client's address into the key it is limited
// under, the default of every middleware adapter: an IPv6 client by its
// network, since one host commonly owns a whole /64 and can take a fresh
// address in it for every request.
package clientaddr

import (
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the IPv6 network a client is keyed by when the
// adapter's IPv6Prefix is 0.
const DefaultIPv6Prefix = 64

// Key is the key of the client address ip when IPv6 clients are keyed by
// their network of prefix bits (1 to 128): an IPv4 address, or an
// IPv4-mapped IPv6 one, as the IPv4 address ("203.0.113.7"); an IPv6
// address as its network ("2001:db8:1:2::/64"), or for 128 bits as itself,
// in its canonical form without a zone, so that spelling it otherwise
// ("2001:DB8:0::1") makes no new key. A proxy header's list of hops
// (Fiber's c.IP() returns X-Forwarded-For as it is unless the app sets
// EnableIPValidation) is keyed entry by entry, each address as above
// ("2001:db8:1:2::/64, 10.0.0.1"): an IPv6 client behind the same
// proxies is grouped by its network, and the entries a proxy appended
// stay in the key, so that a client, who writes the first entries as it
// likes, cannot take another client's key. Text that is no address is
// kept as it is.
func Key(ip string, bits int) string {
	if strings.IndexByte(ip, ',') >= 0 {
		return listKey(ip, bits)
	}
	if strings.IndexByte(ip, ':') < 0 {
		return ip // IPv4, or no address: as it is, without parsing
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = a.WithZone("")
	if a.Is4In6() {
		return a.Unmap().String()
	}
	if bits >= 128 {
		return a.String()
	}
	p, _ := a.Prefix(bits) // bits is within [1, 128]
	return p.String()
}

// Bounds of a list that listKey keys entry by entry; a longer one is kept
// as it is, so that a client's long header costs no more than a short one.
const (
	listMostEntries = 16
	listMostBytes   = 1024
)

// listKey is Key of a proxy header's list: each entry's key, joined by
// ", ".
func listKey(list string, bits int) string {
	if len(list) > listMostBytes || strings.Count(list, ",") >= listMostEntries {
		return list
	}
	var b strings.Builder
	b.Grow(len(list))
	for {
		entry, rest, more := strings.Cut(list, ",")
		b.WriteString(Key(strings.TrimSpace(entry), bits))
		if !more {
			return b.String()
		}
		b.WriteString(", ")
		list = rest
	}
}
