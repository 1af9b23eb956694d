// Package timestep chooses the time step a rate limit is decided in.
//
// The step functions, in Go and in Lua, count time in whole steps and form
// products of a limit and a window (in steps) up to about three times
// limit × window. Lua numbers are doubles, exact for integers below 2^53,
// so limit × window must stay within 2^51. A step of 1 ms allows that for
// most quotas: up to 4,294,967,295 per 8.7 minutes, or 625 million per
// hour. A larger quota (a billion per month) or a longer window (a year,
// or "never resets") is decided in coarser steps, the finest for which the
// product fits: the resolution is then the step, for example 1 s for a
// billion per 30 days, and a window is a whole number of steps, rounded up.
package timestep

import (
	"strconv"
	"time"
)

// MaxProduct bounds limit × window, window in steps.
const MaxProduct = 1 << 51

// For returns the step, in ms, for a limit whose quota (its largest count:
// the limit, or a token bucket's burst) is at most quota, over a window of
// windowMS ms: 1 when quota × windowMS fits within MaxProduct, else about
// the smallest step for which quota × (windowMS in steps, rounded up)
// does: the first of the next divisorSearch steps from it that divides the
// window, so that the window stays exact (an hour in steps of 8 ms, not
// 3600.002 s in steps of 7), or failing that the smallest. quota must be
// in [1, 2^32) and windowMS >= 1.
func For(quota, windowMS int64) int64 {
	per := MaxProduct / quota // the longest window, in steps, that fits; >= 2^19
	if windowMS <= per {
		return 1
	}
	least := (windowMS + per - 1) / per
	for step := least; step < least+divisorSearch; step++ {
		if windowMS%step == 0 {
			return step
		}
	}
	return least
}

// divisorSearch is how many steps For tries for one that divides the
// window: enough for the windows people write (minutes, hours, days, 30
// days, a year), and a bound on the work of a call.
const divisorSearch = 256

// Steps is the window of windowMS ms in whole steps of step ms, rounded up.
func Steps(windowMS, step int64) int64 {
	return (windowMS + step - 1) / step
}

// AppendWindow appends a window of ms milliseconds in a short form, one per
// value: hours, minutes and seconds ("1h30m", "15s") when it is whole
// seconds, else milliseconds ("1500ms").
func AppendWindow(b []byte, ms int64) []byte {
	if ms%1000 != 0 {
		return append(strconv.AppendInt(b, ms, 10), "ms"...)
	}
	s := ms / 1000
	for _, unit := range [...]struct {
		secs int64
		name byte
	}{{3600, 'h'}, {60, 'm'}, {1, 's'}} {
		if n := s / unit.secs; n > 0 {
			b = append(strconv.AppendInt(b, n, 10), unit.name)
			s -= n * unit.secs
		}
	}
	return b
}

// Millis is d in whole milliseconds, rounded up (d >= 0): a window's
// length as the limiter keeps it.
func Millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// Seconds is d in whole seconds, rounded up (d >= 0), as headers give
// durations.
func Seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// Never is the longest Duration: the RetryAfter of a take that can never
// be admitted, as the engine (quota.Never) and its Redis twin report it.
const Never = time.Duration(1<<63 - 1)
