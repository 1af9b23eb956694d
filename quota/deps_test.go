package quota

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The engine and everything below it build without Fiber or fasthttp.
func TestNoFiberBelow(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/redis/go-redis/v9", "the list is of this package's dependencies")
	for _, dep := range deps {
		require.NotContains(t, dep, "gofiber", "quota depends on %s", dep)
		require.NotContains(t, dep, "valyala", "quota depends on %s", dep)
	}
}
