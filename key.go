package limiter

import (
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/gofiber/fiber/v2"
)

// isDefaultKeyGenerator reports whether f is ConfigDefault's c.IP() key.
func isDefaultKeyGenerator(f func(*fiber.Ctx) string) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(ConfigDefault.KeyGenerator).Pointer()
}

// ipKeyer is the default key for the in-memory manager: the client's IP as
// c.IP() would give it, but as its 4 or 16 raw bytes, read without
// allocating. When the app reads the client IP from a proxy header
// (fiber.Config.ProxyHeader) it defers to c.IP().
type ipKeyer struct {
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
	if src.proxyHeader {
		return c.IP()
	}
	ip := c.Context().RemoteIP()
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	// Only valid during the request: the manager copies keys it keeps.
	return unsafe.String(unsafe.SliceData(ip), len(ip))
}
