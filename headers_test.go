package limiter

// One limiter's rate-limit headers: each HeaderMode, the IETF fields' values, invalid settings.

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
