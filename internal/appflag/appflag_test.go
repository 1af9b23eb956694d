package appflag

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

type app struct{ flag bool }

// Each app's fact is read once while it is among the apps remembered, and
// served in turn with another without an allocation; apps past the bound
// are read each time, and still get their own fact.
func TestFlag(t *testing.T) {
	var f Flag[app]
	reads := 0
	read := func(a *app) bool { reads++; return a.flag }
	on, off := &app{flag: true}, &app{}
	for range 10 {
		assert.True(t, f.Of(on, read))
		assert.False(t, f.Of(off, read))
	}
	assert.Equal(t, 2, reads)
	assert.Zero(t, testing.AllocsPerRun(100, func() { f.Of(on, read); f.Of(off, read) }))

	many := make([]*app, 2*maxApps)
	for i := range many {
		many[i] = &app{flag: i%2 == 0}
	}
	for range 2 {
		for i, a := range many {
			assert.Equal(t, i%2 == 0, f.Of(a, read))
		}
	}
	assert.True(t, f.Of(on, read))
}
