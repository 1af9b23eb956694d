package limiter

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/clientaddr"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hostile tests of a negative MaxFunc and of proxy header lists.

// A proxy header list an attacker writes: the hops a proxy appends stay
// in the key, so writing a victim's address first takes no victim's key;
// mapped and zoned spellings fold hop by hop; a header of 1 MB costs a
// bounded time and allocations.
func TestHostileProxyListKeys(t *testing.T) {
	victim := clientaddr.Key("203.0.113.7", 64)
	for _, h := range []string{"junk1, 203.0.113.7", "203.0.113.7, 10.0.0.1", " , ,203.0.113.7", "x, ::ffff:203.0.113.7"} {
		assert.NotEqual(t, victim, clientaddr.Key(h, 64), h)
	}
	assert.Equal(t, victim, clientaddr.Key("::ffff:203.0.113.7", 64))
	assert.Equal(t, "203.0.113.7, 10.0.0.1", clientaddr.Key("::ffff:203.0.113.7,10.0.0.1", 64))
	assert.Equal(t, "2001:db8::/64", clientaddr.Key("2001:DB8:0:0:ffff::9", 64))
	assert.Equal(t, "2001:db8::/64, 1.2.3.4", clientaddr.Key("2001:db8::2, 1.2.3.4", 64))
	assert.Equal(t, "junk, fe80::/64", clientaddr.Key("junk, fe80::1%eth0", 64))
	// No address in it: the list as it is, never an address's key.
	assert.Equal(t, "[2001:db8::1]:443, junk", clientaddr.Key("[2001:db8::1]:443, junk", 64))

	huge := strings.Repeat("not-an-address,", 1<<16) + "198.51.100.1"
	commas := strings.Repeat(",", 1<<20)
	for name, h := range map[string]string{"entries": huge, "commas": commas} {
		start := time.Now()
		k := clientaddr.Key(h, 64)
		took := time.Since(start)
		t.Logf("%s: %d bytes keyed in %v", name, len(h), took)
		assert.Less(t, took, time.Second, name)
		assert.LessOrEqual(t, len(k), len(h))
	}
	allocs := testing.AllocsPerRun(3, func() { clientaddr.Key(commas, 64) })
	t.Logf("a 1 MB header of commas: %.0f allocations", allocs)
	// Before the list was parsed a key cost no allocation; a client's
	// commas must not buy one each.
	assert.Less(t, allocs, 64.0, "allocations for one request's key")
}

// A negative MaxFunc rejects, whatever the cost (0 too) and
// SkipFailedRequests: nothing counted, nothing refunded, no other key
// touched.
func TestHostileNegativeMaxFunc(t *testing.T) {
	for _, m := range []int{math.MinInt, -1} {
		for _, cost := range []int{0, 1} {
			clock := &testClock{}
			cfg := Config{
				Max: 2, Expiration: time.Minute, KeyGenerator: headerKey, SkipFailedRequests: true,
				MaxFunc: func(c *fiber.Ctx) int {
					if c.Get("X-Key") == "blocked" {
						return m
					}
					return 2
				},
				Cost: func(*fiber.Ctx) int { return cost },
			}
			app := newApp(cfg, clock, func(c *fiber.Ctx) error { return c.SendStatus(500) })
			for range 5 {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.Header.Set("X-Key", "blocked")
				resp, err := app.Test(req, -1)
				require.NoError(t, err)
				assert.Equal(t, fiber.StatusTooManyRequests, resp.StatusCode, "MaxFunc %d, cost %d", m, cost)
			}
			// Another key's quota is whole (its failed requests refunded).
			for range 4 {
				resp := get(t, app, "/", "other")
				assert.Equal(t, 500, resp.StatusCode, "MaxFunc %d, cost %d: the other key", m, cost)
			}
		}
	}
}
