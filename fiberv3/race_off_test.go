//go:build !race

package limiter

// raceEnabled reports whether the race detector is on: it makes sync.Pool
// drop items, so allocation counts mean nothing under it.
const raceEnabled = false
