package timestep

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestFor(t *testing.T) {
	const never = int64(math.MaxInt64/int64(time.Millisecond)) + 1 // ms of the longest Duration, rounded up
	for _, tt := range []struct {
		name          string
		quota, window int64
		step          int64
	}{
		{"small", 5, 60_000, 1},
		{"at the bound", 1 << 31, 1 << 20, 1},
		{"10^8 per day", 1e8, 86_400_000, 4},
		{"2^32-1 per hour", 1<<32 - 1, 3_600_000, 8},
		{"10^9 per 30 days", 1e9, 30 * 86_400_000, 1152},
		{"2*10^9 per year", 2e9, 365 * 86_400_000, 28_032},
		{"5 per never", 5, never, 1},
		{"2^32-1 per never", 1<<32 - 1, never, 17_592_187}, // no divisor near: rounded up
	} {
		step := For(tt.quota, tt.window)
		assert.Equal(t, tt.step, step, tt.name)
		windowSteps := Steps(tt.window, step)
		assert.LessOrEqual(t, tt.quota*windowSteps, int64(MaxProduct), tt.name)
		least := step
		for least > 1 && tt.quota*Steps(tt.window, least-1) <= MaxProduct {
			least--
		}
		assert.Less(t, step-least, int64(divisorSearch), "%s: near the finest step that fits, %d", tt.name, least)
		if step != least {
			assert.Zero(t, tt.window%step, "%s: a step that divides the window", tt.name)
		}
	}
}
