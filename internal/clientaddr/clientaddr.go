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
// ("2001:DB8:0::1") makes no new key; text that is no address (from a
// proxy header) as it is.
func Key(ip string, bits int) string {
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
