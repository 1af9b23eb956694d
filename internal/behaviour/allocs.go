package behaviour

import (
	"net/http"

	rlheaders "github.com/fiberlimit/limiter/internal/headers"
)

// AllocCase is a request through an in-memory limiter, of a key already
// tracked, that must allocate nothing of the limiter's own: the Fiber
// adapters run AllocCases for every algorithm (the sliding log with Max
// at most 10,000, its largest).
type AllocCase struct {
	Name   string
	Max    int // per hour
	Mode   rlheaders.Mode
	Status int
}

// AllocCases: admitted with header values the limiter holds as text (Max
// 100) and with values it formats (Max 2^26), and rejected, with either
// set of headers.
var AllocCases = []AllocCase{
	{"admitted, table values", 100, rlheaders.XRateLimit, http.StatusOK},
	{"admitted, formatted values", 1 << 26, rlheaders.XRateLimit, http.StatusOK},
	{"admitted, both header sets", 1 << 26, rlheaders.Both, http.StatusOK},
	{"rejected", 1, rlheaders.XRateLimit, http.StatusTooManyRequests},
	{"rejected, both header sets", 1, rlheaders.Both, http.StatusTooManyRequests},
}
