package limiter

// The largest values a Config takes: Max up to 2^32-1, the longest Duration for each duration.

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/timestep"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Any Max below 2^32 works with any Expiration up to the longest Duration,
// in both backends and each algorithm: a take of Max-3 then three of 1
// leave exactly 3, 2, 1 and 0, the next is rejected with a Retry-After
// within the window, and the headers carry the quota and a window no
// shorter than Expiration (quotas that milliseconds cannot carry exactly
// are counted in coarser steps, which round the window up by less than a
// step).
func TestLargeQuotas(t *testing.T) {
	const never = time.Duration(math.MaxInt64)
	quotas := []struct {
		name string
		max  int
		exp  time.Duration
	}{
		{"10^8 per day", 100_000_000, 24 * time.Hour},
		{"10^9 per 30 days", 1_000_000_000, 30 * 24 * time.Hour},
		{"2*10^9 per year", 2_000_000_000, 365 * 24 * time.Hour},
		{"2^32-1 per hour", math.MaxUint32, time.Hour},
		{"5 per the longest Duration", 5, never},
		{"2*10^9 per the longest Duration", 2_000_000_000, never},
	}
	cost := func(c *fiber.Ctx) int {
		n, _ := strconv.Atoi(c.Get("X-Cost"))
		return n
	}
	for _, alg := range algorithms {
		for _, b := range limitBackends() {
			for _, q := range quotas {
				if _, log := alg.mw.(SlidingLog); log && q.max > 10_000 {
					continue // a log keeps one entry per unit of Max
				}
				t.Run(alg.name+"/"+b.name+"/"+q.name, func(t *testing.T) {
					app := newApp(b.config(t, Config{
						Max: q.max, Expiration: q.exp, LimiterMiddleware: alg.mw, Cost: cost, Headers: HeadersBoth,
					}), &testClock{}, nil)
					send := func(cost int) *http.Response {
						req := httptest.NewRequest(http.MethodGet, "/", nil)
						req.Header.Set("X-Cost", strconv.Itoa(cost))
						resp, err := app.Test(req, -1)
						require.NoError(t, err)
						require.NoError(t, resp.Body.Close())
						return resp
					}
					for i, c := range []int{q.max - 3, 1, 1, 1} {
						resp := send(c)
						require.Equal(t, 200, resp.StatusCode, "take %d of %d", i, c)
						assert.Equal(t, strconv.Itoa(q.max), resp.Header.Get("X-RateLimit-Limit"))
						assert.Equal(t, strconv.Itoa(3-i), resp.Header.Get("X-RateLimit-Remaining"), "take %d", i)
					}
					resp := send(1)
					require.Equal(t, 429, resp.StatusCode)
					retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
					require.NoError(t, err)
					window := timestep.Seconds(q.exp)
					assert.Positive(t, retry)
					assert.LessOrEqual(t, retry, 2*window+1, "within the window (two for the sliding estimate)")
					_, policy := sfItem(t, resp.Header.Get("RateLimit-Policy"))
					assert.Equal(t, int64(q.max), policy["q"])
					w := policy["w"].(int64)
					assert.GreaterOrEqual(t, w, window, "w is the window")
					assert.LessOrEqual(t, w, window+window/100_000+1, "rounded up by less than a step")
				})
			}
		}
	}
}

// The longest Duration is a valid StorageTimeout and BreakerCooldown too:
// FailClosed's 503 then says the cool-down in seconds, not 0.
func TestLongestDurations(t *testing.T) {
	failing := newFlakyStorage(t)
	failing.mode.Store(storageErr)
	app := newApp(Config{
		Storage: failing, FailurePolicy: FailClosed,
		StorageTimeout: time.Duration(math.MaxInt64), BreakerCooldown: time.Duration(math.MaxInt64),
	}, nil, nil)
	resp := get(t, app, "/", "")
	require.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, strconv.FormatInt(timestep.Seconds(time.Duration(math.MaxInt64)), 10), resp.Header.Get("Retry-After"))
}

// An Expiration of the longest Duration decides on Redis exactly as in
// memory: the same statuses and headers for the same requests, as the
// clock runs from milliseconds to centuries, for each algorithm.
func TestLongestExpirationRedisMatchesMemory(t *testing.T) {
	const never = time.Duration(math.MaxInt64)
	steps := []struct {
		advance time.Duration
		cost    int
	}{
		{0, 1}, {time.Millisecond, 2}, {time.Second, 1}, {time.Hour, 1}, {0, 1},
		{24 * time.Hour, 3}, {365 * 24 * time.Hour, 1}, {100 * 365 * 24 * time.Hour, 2}, {0, 0},
	}
	names := []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After", "Ratelimit", "Ratelimit-Policy"}
	cost := func(c *fiber.Ctx) int {
		n, _ := strconv.Atoi(c.Get("X-Cost"))
		return n
	}
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			seen := map[string][]string{}
			for _, b := range limitBackends() {
				clock := &testClock{}
				clock.advance(time.Hour)
				app := newApp(b.config(t, Config{
					Max: 5, Expiration: never, LimiterMiddleware: alg.mw, Cost: cost, Headers: HeadersBoth,
				}), clock, nil)
				for i, s := range steps {
					clock.advance(s.advance)
					req := httptest.NewRequest(http.MethodGet, "/", nil)
					req.Header.Set("X-Cost", strconv.Itoa(s.cost))
					resp, err := app.Test(req, -1)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					got := strconv.Itoa(i) + ": " + strconv.Itoa(resp.StatusCode)
					for _, name := range names {
						got += " " + name + "=" + resp.Header.Get(name)
					}
					seen[b.name] = append(seen[b.name], got)
				}
			}
			require.Equal(t, seen["memory"], seen["redis"])
			assert.Contains(t, seen["memory"][5], ": 429", "the quota of 5 is spent and never comes back")
		})
	}
}
