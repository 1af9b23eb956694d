package clientaddr

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		name, ip string
		bits     int
		want     string
	}{
		{"IPv4", "203.0.113.7", 64, "203.0.113.7"},
		{"IPv6 by its /64", "2001:db8:1:2:aaaa::1", 64, "2001:db8:1:2::/64"},
		{"IPv6 spelled otherwise", "2001:DB8:1:2:AAAA:0::1", 64, "2001:db8:1:2::/64"},
		{"IPv6 on its own", "2001:db8::1", 128, "2001:db8::1"},
		{"IPv4-mapped IPv6", "::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"zone dropped", "fe80::1%eth0", 128, "fe80::1"},
		{"no address", "client-42", 64, "client-42"},
		{"proxy list, IPv6 client", "2001:db8:1:2:aaaa::1, 10.0.0.1", 64, "2001:db8:1:2::/64, 10.0.0.1"},
		{"proxy list, another address of the /64", "2001:db8:1:2:bbbb::9,10.0.0.1", 64, "2001:db8:1:2::/64, 10.0.0.1"},
		{"proxy list, IPv4 client", " 203.0.113.7 , 2001:db8::1", 64, "203.0.113.7, 2001:db8::/64"},
		{"proxy list, junk kept", "unknown, 2001:db8:1:2::5", 64, "unknown, 2001:db8:1:2::/64"},
		{"proxy list, each hop by its network", "2001:db8:1:2::5, 2001:db8:9:9::1", 64, "2001:db8:1:2::/64, 2001:db8:9:9::/64"},
		{"a list too long is kept as it is", strings.Repeat("2001:db8::1,", 16) + "10.0.0.1", 64, strings.Repeat("2001:db8::1,", 16) + "10.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Key(tc.ip, tc.bits))
		})
	}
}

// A client that writes another's address first in a proxy list, which
// the proxy then appends to, does not get that client's key: the appended
// hop stays in it.
func TestProxyListKeepsAppendedHops(t *testing.T) {
	victim := Key("203.0.113.7", 64)
	assert.NotEqual(t, victim, Key("203.0.113.7, 198.51.100.66", 64))
	assert.NotEqual(t, Key("2001:db8:1:2::a", 64), Key("2001:db8:1:2::a, 198.51.100.66", 64))
	for _, list := range []string{"203.0.113.7,", ",203.0.113.7", " , ,203.0.113.7", "203.0.113.7, "} {
		assert.NotEqual(t, victim, Key(list, 64), "%q", list)
	}
}

// A long header costs a bounded number of allocations: it is kept as it
// is past the bounds.
func TestProxyListBoundedCost(t *testing.T) {
	huge := strings.Repeat(",", 1<<20)
	assert.Zero(t, testing.AllocsPerRun(10, func() { _ = Key(huge, 64) }))
	many := strings.Repeat("fe80::1,", 15) + "fe80::1"
	assert.LessOrEqual(t, testing.AllocsPerRun(10, func() { _ = Key(many, 64) }), float64(2*listMostEntries+2))
}
