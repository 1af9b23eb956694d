package behaviour

import (
	"net/http"

	rlheaders "github.com/fiberlimit/limiter/internal/headers"
)

// HeaderNameCase is a response whose rate-limit fields a handler (or a
// middleware in front, when the request is rejected) also set, under
// spellings of its own: in a Fiber app that does not normalize header
// names, the limiter's fields must come out as they do with normalized
// names. The Fiber adapters run HeaderNameCases in both kinds of app.
type HeaderNameCase struct {
	Name    string
	Max     int // per minute; with 1, the second request is the one looked at
	Mode    rlheaders.Mode
	Theirs  [][2]string // added, in order, by the handler (or in front)
	InFront bool
	Status  int
	Want    map[string][]string // canonical field name → its values
}

// HeaderNameCases are the cases of HeaderNameCase.
var HeaderNameCases = []HeaderNameCase{
	{
		Name: "admitted", Max: 5, Mode: rlheaders.XRateLimit, Status: http.StatusOK,
		Theirs: [][2]string{{"X-RateLimit-Remaining", "999"}, {"x-ratelimit-limit", "999"}, {"X-RATELIMIT-RESET", "999"}},
		Want:   map[string][]string{"X-Ratelimit-Remaining": {"4"}, "X-Ratelimit-Limit": {"5"}, "X-Ratelimit-Reset": {"60"}},
	},
	{
		Name: "admitted, IETF", Max: 5, Mode: rlheaders.IETF, Status: http.StatusOK,
		Theirs: [][2]string{{"RateLimit", "theirs"}, {"RateLimit-Policy", "theirs"}},
		// The IETF fields are lists: the limiter adds its member to what
		// is there, as it does for a limiter in front of it.
		Want: map[string][]string{"Ratelimit": {`"default";r=4;t=60, theirs`}, "Ratelimit-Policy": {`"default";q=5;w=60, theirs`}},
	},
	{
		Name: "admitted, IETF, two values", Max: 5, Mode: rlheaders.IETF, Status: http.StatusOK,
		Theirs: [][2]string{{"RateLimit", `"a";r=1;t=1`}, {"RateLimit", `"b";r=1;t=1`}},
		Want:   map[string][]string{"Ratelimit": {`"default";r=4;t=60, "a";r=1;t=1`, `"b";r=1;t=1`}},
	},
	{
		Name: "admitted, IETF, spellings of a list and of a single field", Max: 5, Mode: rlheaders.IETF, Status: http.StatusOK,
		Theirs: [][2]string{{"Retry-After", "4"}, {"RateLimit", `"a";r=1;t=1`}, {"retry-after", "5"}, {"RATELIMIT", `"b";r=1;t=1`}, {"x-request-id", "abc"}},
		// The values of a list keep their order, the limiter's member
		// first, whatever fields the folding of other spellings moves.
		Want: map[string][]string{"Ratelimit": {`"default";r=4;t=60, "a";r=1;t=1`, `"b";r=1;t=1`}, "X-Request-Id": {"abc"}},
	},
	{
		Name: "no headers of its own: theirs kept", Max: 5, Mode: rlheaders.None, Status: http.StatusOK,
		Theirs: [][2]string{{"X-RateLimit-Limit", "A"}, {"x-ratelimit-limit", "B"}},
		Want:   map[string][]string{"X-Ratelimit-Limit": {"A", "B"}},
	},
	{
		Name: "rejected", Max: 1, Mode: rlheaders.XRateLimit, Status: http.StatusTooManyRequests, InFront: true,
		Theirs: [][2]string{{"retry-after", "1000"}, {"X-RateLimit-Remaining", "999"}},
		Want:   map[string][]string{"Retry-After": {"60"}, "X-Ratelimit-Remaining": {"0"}},
	},
	{
		Name: "a field of its own kept", Max: 5, Mode: rlheaders.XRateLimit, Status: http.StatusOK,
		Theirs: [][2]string{{"x-request-id", "abc"}},
		Want:   map[string][]string{"X-Request-Id": {"abc"}, "X-Ratelimit-Remaining": {"4"}},
	},
}
