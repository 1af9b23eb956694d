package limiter

import (
	"reflect"

	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/gofiber/fiber/v3"
)

// defaultKeyGenerator is ConfigDefault's KeyGenerator: the client address,
// an IPv6 client by its /64.
func defaultKeyGenerator(c fiber.Ctx) string {
	return clientaddr.Key(c.IP(), clientaddr.DefaultIPv6Prefix)
}

// isDefaultKeyGenerator reports whether f is the default client-address key
// (whatever ConfigDefault.KeyGenerator has since been set to).
func isDefaultKeyGenerator(f func(fiber.Ctx) string) bool {
	return reflect.ValueOf(f).Pointer() == reflect.ValueOf(defaultKeyGenerator).Pointer()
}
