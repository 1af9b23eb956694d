package limiter

// The key a request is counted under: the client's address by default, copied before it is kept.

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// addrApp serves GET / behind a limiter of cfg; with proxyHeader the client
// address comes from that header (the text path of the default key), else
// from the connection (the raw-bytes path in memory).
func addrApp(cfg Config, proxyHeader string) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ProxyHeader: proxyHeader})
	app.Use(New(cfg))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	return app.Handler()
}

// fromAddr sends GET / from the client address addr and returns the status.
func fromAddr(t *testing.T, h fasthttp.RequestHandler, proxyHeader, addr string) int {
	t.Helper()
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI("/")
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.200"), Port: 40000}
	if proxyHeader != "" {
		req.Header.Set(proxyHeader, addr)
	} else {
		remote.IP = net.ParseIP(addr)
		require.NotNil(t, remote.IP, addr)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, remote, nil)
	h(&ctx)
	return ctx.Response.StatusCode()
}

// The default key takes an IPv6 client by its network: ten addresses of one
// /64 share one limit, another /64 or /48 is another client, an IPv4
// address is a client of its own, and an IPv4-mapped IPv6 address is its
// IPv4 address. In memory by the connection's address (raw bytes) and by
// a proxy header (text), and on Redis; and with IPv6Prefix 48 and 128.
func TestIPv6ClientsByNetwork(t *testing.T) {
	type path struct {
		name        string
		proxyHeader string
		storage     func(t *testing.T) fiber.Storage
		onDecision  bool // the key as text in memory, for the hook
	}
	paths := []path{
		{name: "memory, connection"},
		{name: "memory, proxy header", proxyHeader: "X-Real-IP"},
		{name: "memory, with a hook", onDecision: true},
		{name: "redis, connection", storage: func(t *testing.T) fiber.Storage { return redis.New(redistest.Start(t).Client(t)) }},
		{name: "redis, proxy header", proxyHeader: "X-Real-IP", storage: func(t *testing.T) fiber.Storage { return redis.New(redistest.Start(t).Client(t)) }},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			newHandler := func(prefix int) fasthttp.RequestHandler {
				cfg := Config{Max: 3, Expiration: time.Minute, IPv6Prefix: prefix, Name: "ipv6"}
				if p.storage != nil {
					cfg.Storage = p.storage(t)
				}
				if p.onDecision {
					cfg.OnDecision = func(*fiber.Ctx, DecisionEvent) {}
				}
				return addrApp(cfg, p.proxyHeader)
			}
			send := func(h fasthttp.RequestHandler, addrs ...string) (admitted int) {
				for _, a := range addrs {
					switch code := fromAddr(t, h, p.proxyHeader, a); code {
					case 200:
						admitted++
					case 429:
					default:
						t.Fatalf("status %d from %s", code, a)
					}
				}
				return admitted
			}
			h := newHandler(0)
			var one64 []string
			for _, suffix := range []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "a:b:c:d"} {
				if suffix == "a:b:c:d" {
					one64 = append(one64, "2001:db8:1:2:a:b:c:d")
					continue
				}
				one64 = append(one64, "2001:db8:1:2::"+suffix)
			}
			assert.Equal(t, 3, send(h, one64...), "ten addresses of one /64 are one client")
			if p.proxyHeader != "" {
				assert.Equal(t, 0, send(h, "2001:DB8:1:2:0:0:0:99"), "another spelling of the same /64")
			}
			assert.Equal(t, 3, send(h, "2001:db8:1:3::1", "2001:db8:1:3::2", "2001:db8:1:3::3", "2001:db8:1:3::4"), "another /64")
			assert.Equal(t, 1, send(h, "2001:db8:2::1"), "another /48")
			assert.Equal(t, 3, send(h, "192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.1"), "an IPv4 client")
			assert.Equal(t, 1, send(h, "192.0.2.2"), "its IPv4 neighbour is another client")
			assert.Equal(t, 0, send(h, "::ffff:192.0.2.1"), "an IPv4-mapped address is the IPv4 address")

			wide := newHandler(48)
			assert.Equal(t, 3, send(wide, "2001:db8:7:1::1", "2001:db8:7:2::1", "2001:db8:7:3::1", "2001:db8:7:4::1"), "/48: one client")
			whole := newHandler(128)
			assert.Equal(t, 4, send(whole, "2001:db8:9::1", "2001:db8:9::2", "2001:db8:9::3", "2001:db8:9::4"), "/128: each address")
		})
	}
}

func TestIPKey(t *testing.T) {
	for _, tt := range []struct {
		ip   string
		bits int
		want string
	}{
		{"203.0.113.7", 64, "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:DB8:1:2::99", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2ff:3:4:5:6", 56, "2001:db8:1:200::/56"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"2001:0db8:0:0::1", 128, "2001:db8::1"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"not an address", 64, "not an address"},
		{"1.2.3.4, 5.6.7.8", 64, "1.2.3.4, 5.6.7.8"}, // a proxy list, hop by hop
		{"", 64, ""},
	} {
		assert.Equal(t, tt.want, ipKey(tt.ip, tt.bits), "%s /%d", tt.ip, tt.bits)
	}
	assert.PanicsWithValue(t, "limiter: IPv6Prefix is 129; it must be 0 (the default, 64) to 128 (each address on its own)", func() { New(Config{IPv6Prefix: 129}) })
	assert.PanicsWithValue(t, "limiter: IPv6Prefix is -1; it must be 0 (the default, 64) to 128 (each address on its own)", func() { New(Config{IPv6Prefix: -1}) })
}

// A key from c.Get points into the request's buffer, which Fiber reuses;
// what the limiter keeps must not change with it, even when the handler
// rewrites the header in place before a refund.
func TestKeyIsCopiedBeforeKept(t *testing.T) {
	for _, cfg := range []Config{{}, {Storage: newMapStorage()}} {
		cfg.Max, cfg.KeyGenerator = 1, headerKey
		app := newApp(cfg, &testClock{}, nil)
		require.Equal(t, 200, get(t, app, "/", "aaaa").StatusCode)
		require.Equal(t, 200, get(t, app, "/", "bbbb").StatusCode)
		require.Equal(t, 429, get(t, app, "/", "aaaa").StatusCode)
		require.Equal(t, 429, get(t, app, "/", "bbbb").StatusCode)
	}
	cfg := Config{Max: 1, KeyGenerator: headerKey, SkipSuccessfulRequests: true}
	app := newApp(cfg, &testClock{}, func(c *fiber.Ctx) error {
		c.Request().Header.Set("X-Key", "zzzz")
		return c.SendString("ok")
	})
	for range 3 {
		require.Equal(t, 200, get(t, app, "/", "aaaa").StatusCode, "the refund must reach aaaa")
	}
}

// Behind a proxy whose header lists the hops (X-Forwarded-For, read
// without Fiber's EnableIPValidation, so c.IP() is the whole list), the
// default key takes the list hop by hop, each address as a client's: two
// addresses of one IPv6 /64 behind the same proxy are one client; another
// /64 is another; and a client that writes a victim's address first, to
// which the proxy appends its own hop, does not take the victim's key.
func TestProxyListKeyedByClient(t *testing.T) {
	const hdr = "X-Forwarded-For"
	h := addrApp(Config{Max: 1, Expiration: time.Hour}, hdr)
	require.Equal(t, fiber.StatusOK, fromAddr(t, h, hdr, "2001:db8:1:2::a, 10.0.0.1"))
	require.Equal(t, fiber.StatusTooManyRequests, fromAddr(t, h, hdr, "2001:db8:1:2::b,10.0.0.1"), "the same /64 behind the same proxy")
	require.Equal(t, fiber.StatusOK, fromAddr(t, h, hdr, "2001:db8:1:3::a, 10.0.0.1"), "another /64")
	require.Equal(t, fiber.StatusOK, fromAddr(t, h, hdr, "203.0.113.7"), "a victim")
	require.Equal(t, fiber.StatusOK, fromAddr(t, h, hdr, "203.0.113.7, 198.51.100.66"), "one who writes the victim's address first")
	require.Equal(t, fiber.StatusTooManyRequests, fromAddr(t, h, hdr, "203.0.113.7"), "the victim, on its own key")
}

// A KeyGenerator that returns "" lumps such requests under one key, as in
// Fiber; the first time, and only then, the limiter says so in the log.
func TestEmptyKeyLogged(t *testing.T) {
	logs := captureLogOutput(t)
	app := newApp(Config{Max: 2, Expiration: time.Hour, KeyGenerator: headerKey}, nil, nil)
	for range 3 {
		get(t, app, "/", "")
	}
	assert.Equal(t, fiber.StatusTooManyRequests, get(t, app, "/", "").StatusCode, "one key for all")
	assert.Equal(t, 1, strings.Count(logs.String(), "KeyGenerator returned an empty key"), logs.String())
	get(t, app, "/", "someone")
	assert.Equal(t, 1, strings.Count(logs.String(), "empty key"))
}
