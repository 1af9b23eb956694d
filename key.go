package limiter

import (
	"reflect"
	"unsafe"

	"github.com/fiberlimit/limiter/internal/appflag"
	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/gofiber/fiber/v2"
)

// defaultIPv6Prefix is the IPv6 network a client is keyed by when
// Config.IPv6Prefix is 0: one host commonly owns a whole /64 and can take a
// fresh address in it for every request.
const defaultIPv6Prefix = clientaddr.DefaultIPv6Prefix

// defaultKeyGenerator is ConfigDefault's KeyGenerator: the client address,
// an IPv6 client by its /64.
func defaultKeyGenerator(c *fiber.Ctx) string { return ipKey(c.IP(), defaultIPv6Prefix) }

// isDefaultKeyGenerator reports whether f is the default client-address key
// (whatever ConfigDefault.KeyGenerator has since been set to).
func isDefaultKeyGenerator(f func(*fiber.Ctx) string) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(defaultKeyGenerator).Pointer()
}

// ipKey is the key of the client address ip when IPv6 clients are keyed by
// their network of prefix bits (see clientaddr.Key).
func ipKey(ip string, bits int) string { return clientaddr.Key(ip, bits) }

// ipKeyer is the default key for the in-memory manager: the client's
// address as ipKey gives it, but as raw bytes read without allocating: an
// IPv4 address as its 4 bytes, an IPv6 one as the first bits/8 bytes of its
// 16 (no other key of this limiter is 4 bytes long but an IPv4 address).
// When the app reads the client address from a proxy header
// (fiber.Config.ProxyHeader), or for a prefix that is not a whole number of
// bytes, or 32 bits, it falls back to ipKey's text, which allocates.
type ipKeyer struct {
	bits        int
	proxyHeader appflag.Flag[fiber.App] // the app reads the address from a header
}

// readsProxyHeader reports whether app reads the client's address from a
// header (fiber.Config.ProxyHeader).
func readsProxyHeader(app *fiber.App) bool { return app.Config().ProxyHeader != "" }

func (k *ipKeyer) key(c *fiber.Ctx) string {
	if k.proxyHeader.Of(c.App(), readsProxyHeader) || k.bits%8 != 0 || k.bits == 32 {
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
