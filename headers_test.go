package limiter

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sfItem parses a header as an RFC 9651 List of exactly one Item whose
// value is a String, and returns the String and the Item's parameters.
func sfItem(t *testing.T, value string) (string, map[string]any) {
	t.Helper()
	list, err := httpsfv.UnmarshalList([]string{value})
	require.NoError(t, err, "not a structured-field List: %q", value)
	require.Len(t, list, 1, "%q", value)
	item, ok := list[0].(httpsfv.Item)
	require.True(t, ok, "not an Item: %q", value)
	name, ok := item.Value.(string)
	require.True(t, ok, "policy name is not a String: %q", value)
	params := map[string]any{}
	for _, k := range item.Params.Names() {
		params[k], _ = item.Params.Get(k)
	}
	return name, params
}

// ietfFields is what the IETF headers of a response say: the policy's
// name, q and w, and RateLimit's r and t (-1 where absent).
type ietfFields struct {
	policy, name string
	q, w, r, t   int64
}

func ietfOf(t *testing.T, resp *http.Response) ietfFields {
	t.Helper()
	f := ietfFields{q: -1, w: -1, r: -1, t: -1}
	if v := resp.Header.Get("RateLimit-Policy"); v != "" {
		var params map[string]any
		f.policy, params = sfItem(t, v)
		f.q, f.w = params["q"].(int64), params["w"].(int64)
		require.Len(t, params, 2, "%q: only q and w", v)
	}
	if v := resp.Header.Get("RateLimit"); v != "" {
		var params map[string]any
		f.name, params = sfItem(t, v)
		f.r, f.t = params["r"].(int64), params["t"].(int64)
		require.Len(t, params, 2, "%q: only r and t", v)
	}
	return f
}

// In every header mode, for every algorithm, the headers of two admitted
// requests and a rejected one (Max 2 per 10 s, the third 2.5 s on) are
// those the mode promises: the IETF fields parse as RFC 9651 structured
// fields and agree with the X-RateLimit ones, Retry-After is never earlier
// than t, and a mode leaves out the other set.
func TestHeaderModes(t *testing.T) {
	modes := []HeaderMode{HeadersXRateLimit, HeadersIETF, HeadersBoth, HeadersNone}
	for _, alg := range algorithms {
		// What HeadersBoth sends, the reference for the other modes.
		var reference [3]struct {
			x    headers
			ietf ietfFields
		}
		for _, mode := range modes {
			t.Run(alg.name+"/"+mode.String(), func(t *testing.T) {
				clock := &testClock{}
				app := newApp(Config{Max: 2, Expiration: 10 * time.Second, LimiterMiddleware: alg.mw, Headers: mode}, clock, nil)
				for i, code := range []int{200, 200, 429} {
					if i == 2 {
						clock.advance(2500 * time.Millisecond)
					}
					resp := get(t, app, "/", "")
					require.Equal(t, code, resp.StatusCode, "request %d", i)
					x, ietf := headersOf(resp), ietfOf(t, resp)
					hasX := mode == HeadersXRateLimit || mode == HeadersBoth
					hasIETF := mode == HeadersIETF || mode == HeadersBoth
					assert.Equal(t, hasX, x.limit != "", "request %d: X-RateLimit-Limit %q", i, x.limit)
					assert.Equal(t, hasIETF, ietf.q >= 0, "request %d: RateLimit-Policy", i)
					assert.Equal(t, hasIETF, ietf.r >= 0, "request %d: RateLimit", i)
					assert.Equal(t, code == 429, x.retryAfter != "", "request %d: Retry-After %q", i, x.retryAfter)
					if mode == HeadersBoth {
						reference[i].x, reference[i].ietf = x, ietf
						assert.Equal(t, "default", ietf.policy)
						assert.Equal(t, "default", ietf.name)
						assert.Equal(t, x.limit, strconv.FormatInt(ietf.q, 10), "q is the limit")
						assert.Equal(t, int64(10), ietf.w, "w is the window in seconds")
						assert.Equal(t, x.remaining, strconv.FormatInt(ietf.r, 10), "r is what remains")
						if code == 429 {
							assert.Equal(t, x.retryAfter, strconv.FormatInt(ietf.t, 10), "t on a rejection is Retry-After")
						} else {
							assert.Equal(t, x.reset, strconv.FormatInt(ietf.t, 10), "t when admitted is the reset")
						}
					}
					if x.retryAfter != "" && ietf.t >= 0 {
						retry, err := strconv.ParseInt(x.retryAfter, 10, 64)
						require.NoError(t, err)
						assert.GreaterOrEqual(t, retry, ietf.t, "Retry-After is never earlier than t")
					}
				}
			})
		}
		// The modes agree with each other on every value they share.
		for _, mode := range []HeaderMode{HeadersXRateLimit, HeadersIETF} {
			clock := &testClock{}
			app := newApp(Config{Max: 2, Expiration: 10 * time.Second, LimiterMiddleware: alg.mw, Headers: mode}, clock, nil)
			for i := range 3 {
				if i == 2 {
					clock.advance(2500 * time.Millisecond)
				}
				resp := get(t, app, "/", "")
				if mode == HeadersXRateLimit {
					assert.Equal(t, reference[i].x, headersOf(resp), "%s %v request %d", alg.name, mode, i)
				} else {
					assert.Equal(t, reference[i].ietf, ietfOf(t, resp), "%s %v request %d", alg.name, mode, i)
					assert.Equal(t, reference[i].x.retryAfter, resp.Header.Get("Retry-After"))
				}
			}
		}
	}
}

// The exact IETF values: the token bucket's q is its Burst and w the time
// the bucket takes to fill; MaxFunc's limit shows per request; a policy name
// with quotes and a backslash round-trips; the partition key, when asked
// for, is the key's bytes, and is absent otherwise.
func TestIETFHeaderValues(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		key        string
		wantPolicy string
		wantRate   string
		check      func(t *testing.T, name string, policy, rate map[string]any)
	}{
		{
			name:       "fixed window",
			cfg:        Config{Max: 100, Expiration: time.Minute},
			wantPolicy: `"default";q=100;w=60`,
			wantRate:   `"default";r=99;t=60`,
		},
		{
			name:       "token bucket: q is the burst, w the time to fill it",
			cfg:        Config{Max: 2, Expiration: time.Second, Burst: 10, LimiterMiddleware: TokenBucket{}},
			wantPolicy: `"default";q=10;w=5`,
			wantRate:   `"default";r=9;t=1`,
		},
		{
			name:       "sub-second window rounds up",
			cfg:        Config{Max: 3, Expiration: 250 * time.Millisecond, LimiterMiddleware: SlidingWindow{}},
			wantPolicy: `"default";q=3;w=1`,
			wantRate:   `"default";r=2;t=1`,
		},
		{
			name:       "MaxFunc",
			cfg:        Config{MaxFunc: func(*fiber.Ctx) int { return 7 }, Expiration: time.Hour},
			wantPolicy: `"default";q=7;w=3600`,
			wantRate:   `"default";r=6;t=3600`,
		},
		{
			name:       "policy name escaped",
			cfg:        Config{Max: 5, Expiration: time.Minute, PolicyName: `api "v1" \ reads`},
			wantPolicy: `"api \"v1\" \\ reads";q=5;w=60`,
			wantRate:   `"api \"v1\" \\ reads";r=4;t=60`,
			check: func(t *testing.T, name string, _, _ map[string]any) {
				assert.Equal(t, `api "v1" \ reads`, name)
			},
		},
		{
			name:       "partition key",
			cfg:        Config{Max: 5, Expiration: time.Minute, HeaderPartitionKey: true},
			key:        "tenant:7/ü",
			wantPolicy: `"default";q=5;w=60;pk=:dGVuYW50Ojcvw7w=:`,
			wantRate:   `"default";r=4;t=60;pk=:dGVuYW50Ojcvw7w=:`,
			check: func(t *testing.T, _ string, policy, rate map[string]any) {
				assert.Equal(t, []byte("tenant:7/ü"), policy["pk"])
				assert.Equal(t, []byte("tenant:7/ü"), rate["pk"])
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Headers = HeadersIETF
			cfg.KeyGenerator = headerKey
			resp := get(t, newApp(cfg, &testClock{}, nil), "/", tt.key)
			require.Equal(t, 200, resp.StatusCode)
			policy, rate := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")
			assert.Equal(t, tt.wantPolicy, policy)
			assert.Equal(t, tt.wantRate, rate)
			name, policyParams := sfItem(t, policy)
			rateName, rateParams := sfItem(t, rate)
			assert.Equal(t, name, rateName, "both fields name the same policy")
			_, hasPK := policyParams["pk"]
			assert.Equal(t, cfg.HeaderPartitionKey, hasPK, "pk only when asked for")
			if tt.check != nil {
				tt.check(t, name, policyParams, rateParams)
			}
		})
	}
}

// Header settings that cannot work panic at New, naming the field.
func TestHeaderConfigPanics(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{DisableHeaders: true, Headers: HeadersIETF}, "limiter: DisableHeaders is true but Headers is IETF"},
		{Config{Headers: 9}, "limiter: Headers is 9"},
		{Config{PolicyName: "a\nb", Headers: HeadersBoth}, "limiter: PolicyName \"a\\nb\" has byte 0x0a at 1"},
		{Config{PolicyName: "café", Headers: HeadersIETF}, "limiter: PolicyName \"café\" has byte 0xc3 at 3"},
		{Config{PolicyName: "api"}, "limiter: PolicyName is set but Headers is XRateLimit"},
		{Config{HeaderPartitionKey: true, Headers: HeadersNone}, "limiter: HeaderPartitionKey is set but Headers is None"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			assert.PanicsWithValue(t, tt.want+mustPanicSuffix(tt.cfg), func() { New(tt.cfg) })
		})
	}
	assert.NotPanics(t, func() { New(Config{DisableHeaders: true, Headers: HeadersNone}) })
}

// mustPanicSuffix is the rest of the panic message for cfg, after the part
// a test names.
func mustPanicSuffix(cfg Config) string {
	switch {
	case cfg.DisableHeaders:
		return "; set only Headers (HeadersNone)"
	case cfg.Headers > HeadersNone:
		return "; it must be HeadersXRateLimit, HeadersIETF, HeadersBoth or HeadersNone"
	case cfg.Headers != HeadersIETF && cfg.Headers != HeadersBoth:
		return "; PolicyName and HeaderPartitionKey apply to the IETF headers only (HeadersIETF or HeadersBoth)"
	}
	return "; it must be printable ASCII (an RFC 9651 String)"
}

// Two limiters in a row with different policy names: the IETF fields list
// both policies, so a client sees the tighter one too; a handler after the
// limiter reads the headers by their usual names.
func TestIETFHeadersOfStackedLimiters(t *testing.T) {
	app := fiber.New()
	app.Use(New(Config{Max: 1, Expiration: 10 * time.Second, Headers: HeadersIETF, PolicyName: "burst"}))
	app.Use(New(Config{Max: 1000, Expiration: time.Hour, Headers: HeadersBoth, PolicyName: "hourly"}))
	var seen []string
	app.Get("/", func(c *fiber.Ctx) error {
		seen = append(seen, c.GetRespHeader("RateLimit-Policy"), c.GetRespHeader("RateLimit"), c.GetRespHeader("X-RateLimit-Limit"))
		return c.SendString("ok")
	})
	resp := get(t, app, "/", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, `"burst";q=1;w=10, "hourly";q=1000;w=3600`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"burst";r=0;t=10, "hourly";r=999;t=3600`, resp.Header.Get("RateLimit"))
	assert.Equal(t, []string{"", "", ""}, seen, "written once the handler has run, as in Fiber")
	for _, field := range []string{"RateLimit-Policy", "RateLimit"} {
		list, err := httpsfv.UnmarshalList([]string{resp.Header.Get(field)})
		require.NoError(t, err)
		require.Len(t, list, 2, field)
		assert.Equal(t, "burst", list[0].(httpsfv.Item).Value)
		assert.Equal(t, "hourly", list[1].(httpsfv.Item).Value)
	}
	resp = get(t, app, "/", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, `"burst";r=0;t=10`, resp.Header.Get("RateLimit"), "rejected by the first: the second did not run")
}

// With the in-memory default key (the client IP), the partition key and
// the hook see the address as text, as c.IP() gives it.
func TestDefaultKeyIsTextForHookAndPartitionKey(t *testing.T) {
	var keys []string
	app := newApp(Config{Headers: HeadersIETF, HeaderPartitionKey: true, OnDecision: func(_ *fiber.Ctx, e DecisionEvent) {
		keys = append(keys, e.Key)
	}}, nil, nil)
	resp := get(t, app, "/", "")
	assert.Equal(t, []string{"0.0.0.0"}, keys)
	_, params := sfItem(t, resp.Header.Get("RateLimit"))
	assert.Equal(t, []byte("0.0.0.0"), params["pk"])
}

// Two limiters in a row, in each header mode: the one in front admits the
// second request with its quota spent for an hour, the one behind rejects
// it for 10 s. Retry-After is the hour, since a retry in 10 s would be
// rejected in front, and it is never earlier than the t of a RateLimit
// member whose r is 0. The X-RateLimit fields are the rejecting limiter's.
func TestRetryAfterCoversLimitersInFront(t *testing.T) {
	for _, mode := range []HeaderMode{HeadersXRateLimit, HeadersIETF, HeadersBoth, HeadersNone} {
		t.Run(mode.String(), func(t *testing.T) {
			front := Config{Max: 2, Expiration: time.Hour, Headers: mode}
			back := Config{Max: 1, Expiration: 10 * time.Second, Headers: mode}
			if mode == HeadersIETF || mode == HeadersBoth {
				front.PolicyName, back.PolicyName = "hourly", "burst"
			}
			app := fiber.New()
			app.Use(New(front), New(back))
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })

			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			// The limiter in front, on its way out, makes it its own
			// wait, whatever its headers.
			assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
			if mode == HeadersXRateLimit || mode == HeadersBoth {
				assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Limit"), "the rejecting limiter's")
			}
			if v := resp.Header.Get("RateLimit"); v != "" {
				list, err := httpsfv.UnmarshalList([]string{v})
				require.NoError(t, err)
				require.Len(t, list, 2, v)
				retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
				require.NoError(t, err)
				for _, m := range list {
					params := m.(httpsfv.Item).Params
					r, _ := params.Get("r")
					tt, _ := params.Get("t")
					if r.(int64) == 0 {
						assert.GreaterOrEqual(t, retry, tt.(int64), "Retry-After earlier than t of %v in %q", m.(httpsfv.Item).Value, v)
					}
				}
			}
		})
	}
}

// FailClosed's 503 behind a limiter whose quota is spent: Retry-After is
// the front limiter's hour, not the breaker's cool-down of a second.
func TestFailClosedRetryAfterCoversLimitersInFront(t *testing.T) {
	for _, mode := range []HeaderMode{HeadersXRateLimit, HeadersIETF} {
		t.Run(mode.String(), func(t *testing.T) {
			failing := newFlakyStorage(t)
			failing.mode.Store(storageErr)
			app := fiber.New()
			app.Use(
				New(Config{Max: 1, Expiration: time.Hour, Headers: mode}),
				New(Config{Max: 10, Storage: failing, FailurePolicy: FailClosed, BreakerCooldown: time.Second, Headers: mode}),
			)
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			resp := get(t, app, "/", "")
			require.Equal(t, fiber.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
			if mode == HeadersXRateLimit {
				assert.Equal(t, "1", resp.Header.Get("X-RateLimit-Limit"), "the 503 has none of its own: the front limiter's")
				assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
			}
		})
	}
	// Alone, the 503 says the cool-down.
	failing := newFlakyStorage(t)
	failing.mode.Store(storageErr)
	app := newApp(Config{Storage: failing, FailurePolicy: FailClosed, BreakerCooldown: time.Second}, nil, nil)
	resp := get(t, app, "/", "")
	require.Equal(t, fiber.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
}

// A limiter that writes no RateLimit field does not take a member with its
// own policy name for its own: the default-named member of an IETF limiter
// in front still counts.
func TestRetryAfterCoversAnIETFLimiterInFrontOfAnother(t *testing.T) {
	for _, back := range []HeaderMode{HeadersXRateLimit, HeadersNone} {
		t.Run(back.String(), func(t *testing.T) {
			app := fiber.New()
			app.Use(
				New(Config{Max: 2, Expiration: time.Hour, Headers: HeadersIETF}),
				New(Config{Max: 1, Expiration: 10 * time.Second, Headers: back}),
			)
			app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
			require.Equal(t, 200, get(t, app, "/", "").StatusCode)
			resp := get(t, app, "/", "")
			require.Equal(t, 429, resp.StatusCode)
			assert.Equal(t, `"default";r=0;t=3600`, resp.Header.Get("RateLimit"))
			assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
		})
	}
}
