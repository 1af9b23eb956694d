package nethttp

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The net/http middleware builds without Fiber or fasthttp.
func TestNoFiberBelow(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/fiberlimit/limiter/quota")
	for _, dep := range deps {
		require.NotContains(t, dep, "gofiber")
		require.NotContains(t, dep, "valyala")
	}
}
