package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/fiberlimit/limiter/quota"
)

// Figure 7 is not a timing: it counts how often the sliding window's
// two-counter estimate decides otherwise than the exact log would, on a
// Poisson trace at a share of the limit. Each request is judged against
// the history the sliding window itself admitted: the log would admit it
// exactly when that history holds fewer than Max requests in the window
// ending at it. A wrong admission lets a window hold more than Max; a wrong
// rejection turns away a request that fitted.

// estimateLoads are the arrival rates of figure 7, as shares of the limit.
var estimateLoads = []float64{0.8, 1.0, 1.5}

// estimateMaxes are the limits of figure 7, per minute.
var estimateMaxes = []int{10, 100}

// estimateCell is one cell of figure 7: requests, and the wrong decisions.
type estimateCell struct {
	requests, wrongAdmit, wrongReject, admitted int
	logAdmitted                                 int // by SlidingLog on the same trace
	logOver                                     int // its admissions that left more than Max in a window: 0
}

// estimateResult holds figure 7, by Max and load.
type estimateResult struct {
	windows int
	cells   map[int]map[float64]estimateCell
}

// runEstimate plays windows windows of Poisson arrivals for every Max and
// load through a SlidingWindow limiter on a clock of its own.
func runEstimate(o options) (*estimateResult, error) {
	r := &estimateResult{windows: o.estimateWindows, cells: map[int]map[float64]estimateCell{}}
	for _, m := range estimateMaxes {
		r.cells[m] = map[float64]estimateCell{}
		for _, load := range estimateLoads {
			c, err := estimateOne(m, load, o.estimateWindows)
			if err != nil {
				return nil, err
			}
			r.cells[m][load] = c
		}
	}
	return r, nil
}

// estimateOne plays one cell: Max per minute, arrivals at load × Max per
// minute, for windows minutes, in whole milliseconds.
func estimateOne(limit int, load float64, windows int) (estimateCell, error) {
	const window = time.Minute
	now := time.Unix(1_700_000_000, 0)
	limiters := [2]*quota.Limiter{}
	for i, alg := range []quota.Algorithm{quota.SlidingWindow, quota.SlidingLog} {
		l, err := quota.New(quota.Config{
			Algorithm: alg,
			Limits:    []quota.Limit{{Max: limit, Expiration: window}},
			Now:       func() time.Time { return now },
		})
		if err != nil {
			return estimateCell{}, err
		}
		limiters[i] = l
	}
	l := limiters[0]
	rng := rand.New(rand.NewPCG(uint64(limit), math.Float64bits(load)))
	meanGap := float64(window.Milliseconds()) / (load * float64(limit)) // ms between arrivals
	end := now.Add(time.Duration(windows) * window)
	var admitted, logged []time.Time // each one's admissions still in the window
	var c estimateCell
	ctx := context.Background()
	for {
		now = now.Add(time.Duration(rng.ExpFloat64()*meanGap) * time.Millisecond)
		if now.After(end) {
			return c, nil
		}
		for len(admitted) > 0 && !admitted[0].After(now.Add(-window)) {
			admitted = admitted[1:]
		}
		for len(logged) > 0 && !logged[0].After(now.Add(-window)) {
			logged = logged[1:]
		}
		exact := len(admitted) < limit
		res, err := l.Take(ctx, "k", 1)
		if err != nil {
			return estimateCell{}, err
		}
		logRes, err := limiters[1].Take(ctx, "k", 1)
		if err != nil {
			return estimateCell{}, err
		}
		if logRes.Allowed() {
			c.logAdmitted++
			if logged = append(logged, now); len(logged) > limit {
				c.logOver++
			}
		}
		c.requests++
		switch ok := res.Allowed(); {
		case ok && !exact:
			c.wrongAdmit++
		case !ok && exact:
			c.wrongReject++
		}
		if res.Allowed() {
			c.admitted++
			admitted = append(admitted, now)
		}
	}
}

// tables renders figure 7.
func (r *estimateResult) tables() []*table {
	t := &table{
		title:  fmt.Sprintf("7. The sliding window's estimate against the exact log (Poisson arrivals, %d windows of a minute per cell)", r.windows),
		header: []string{"Max per minute", "load", "requests", "admitted", "wrong admissions", "wrong rejections", "the log admits"},
		notes: []string{
			"Each request of the sliding window's trace is judged as SlidingLog would judge it on the history the sliding window admitted: a wrong admission leaves more than Max in the minute ending at it; a wrong rejection turns away a request with fewer than Max before it.",
			"Shares are of all requests; the last column is the share SlidingLog admits of the same trace, on its own history. Not a timing: the figures depend on the seed only (fixed per cell).",
		},
	}
	pct := func(n, of int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(max(1, of))) }
	for _, m := range estimateMaxes {
		for _, load := range estimateLoads {
			c := r.cells[m][load]
			t.add(fmt.Sprint(m), fmt.Sprintf("%.1fx", load), fmt.Sprint(c.requests), pct(c.admitted, c.requests),
				pct(c.wrongAdmit, c.requests), pct(c.wrongReject, c.requests), pct(c.logAdmitted, c.requests))
		}
	}
	return []*table{t}
}
