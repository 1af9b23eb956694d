package headers

import (
	"strconv"
)

// Mode chooses which rate-limit fields a response carries. Retry-After is
// sent with every rejection that can succeed later, in every mode.
type Mode uint8

// The modes; the adapters document them as their HeaderMode.
const (
	XRateLimit Mode = iota
	IETF
	Both
	None
)

// String returns the mode's name, as the adapters' constants have it
// without "Headers".
func (m Mode) String() string {
	switch m {
	case XRateLimit:
		return "XRateLimit"
	case IETF:
		return "IETF"
	case Both:
		return "Both"
	case None:
		return "None"
	}
	return "HeaderMode(" + strconv.Itoa(int(m)) + ")"
}

// Field names in the form fasthttp normalizes names to, as Fiber's c.Set
// stores them. HTTP field names are case-insensitive.
var (
	NameLimit      = []byte("X-Ratelimit-Limit")
	NameRemaining  = []byte("X-Ratelimit-Remaining")
	NameReset      = []byte("X-Ratelimit-Reset")
	NamePolicy     = []byte("Ratelimit-Policy")
	NameRateLimit  = []byte("Ratelimit")
	NameRetryAfter = []byte("Retry-After")
)

// defaultPolicyName names the policy of a limiter without PolicyName.
const defaultPolicyName = "default"
