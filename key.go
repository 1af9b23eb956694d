package limiter

import (
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/gofiber/fiber/v2"
)

// defaultIPv6Prefix is the IPv6 network a client is keyed by when
// Config.IPv6Prefix is 0: one host commonly owns a whole /64 and can take a
// fresh address in it for every request.
const defaultIPv6Prefix = 64

// defaultKeyGenerator is ConfigDefault's KeyGenerator: the client address,
// an IPv6 client by its /64.
func defaultKeyGenerator(c *fiber.Ctx) string { return ipKey(c.IP(), defaultIPv6Prefix) }

// isDefaultKeyGenerator reports whether f is the default client-address key
// (whatever ConfigDefault.KeyGenerator has since been set to).
func isDefaultKeyGenerator(f func(*fiber.Ctx) string) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(defaultKeyGenerator).Pointer()
}

// ipKey is the key of the client address ip when IPv6 clients are keyed by
// their network of prefix bits: an IPv4 address, or an IPv4-mapped IPv6
// one, as the IPv4 address ("203.0.113.7"); an IPv6 address as its network
// ("2001:db8:1:2::/64"), or for 128 bits as itself, in its canonical form
// without a zone, so that spelling it otherwise ("2001:DB8:0::1") makes no
// new key; text that is no address (from a proxy header) as it is.
func ipKey(ip string, bits int) string {
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

// ipKeyer is the default key for the in-memory manager: the client's
// address as ipKey gives it, but as raw bytes read without allocating: an
// IPv4 address as its 4 bytes, an IPv6 one as the first bits/8 bytes of its
// 16 (no other key of this limiter is 4 bytes long but an IPv4 address).
// When the app reads the client address from a proxy header
// (fiber.Config.ProxyHeader), or for a prefix that is not a whole number of
// bytes, or 32 bits, it falls back to ipKey's text, which allocates.
type ipKeyer struct {
	bits int
	last atomic.Pointer[appIPSource]
}

type appIPSource struct {
	app         *fiber.App
	proxyHeader bool
}

func (k *ipKeyer) key(c *fiber.Ctx) string {
	src := k.last.Load()
	if src == nil || src.app != c.App() {
		src = &appIPSource{app: c.App(), proxyHeader: c.App().Config().ProxyHeader != ""}
		k.last.Store(src)
	}
	if src.proxyHeader || k.bits%8 != 0 || k.bits == 32 {
		return ipKey(c.IP(), k.bits)
	}
	ip := c.Context().RemoteIP()
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	} else if len(ip) == 16 {
		ip = ip[:k.bits/8]
	}
	// Only valid during the request: the manager copies keys it keeps.
	return unsafe.String(unsafe.SliceData(ip), len(ip))
}
