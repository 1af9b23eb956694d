package quota

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Timeouts amid answers count as a slow store for slowGrace, from the first
// of a run of them: past it (a Cluster node that hangs while the others
// answer) they count towards the breaker; a run that stopped for longer
// than slowGrace starts afresh.
func TestSlowGrace(t *testing.T) {
	g := &guardedStore{origin: time.Now().Add(-time.Minute)}
	now := func() int64 { return int64(time.Since(g.origin) / time.Millisecond) }
	assert.True(t, g.slowFor(), "the first timeout of a run")
	assert.True(t, g.slowFor(), "within the grace")

	g.slowSince.Store(now() - slowGrace - 1)
	assert.False(t, g.slowFor(), "a run longer than the grace")

	g.slowAt.Store(now() - slowGrace - 1)
	assert.True(t, g.slowFor(), "after a pause longer than the grace, a new run")
}
