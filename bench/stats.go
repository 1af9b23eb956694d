package main

import (
	"math"
	"slices"
	"sort"
)

// median is the median of xs (NaN when empty); xs is left as it was.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// pairedRatio is the median over rounds of a[r]/b[r]: the rounds are
// interleaved, so a slow phase of the machine falls on both sides of a
// ratio alike. Rounds where b is not positive are left out (an added cost
// lost in noise); NaN when none is left.
func pairedRatio(a, b []float64) float64 {
	var ratios []float64
	for r := range min(len(a), len(b)) {
		if b[r] > 0 && !math.IsNaN(a[r]) {
			ratios = append(ratios, a[r]/b[r])
		}
	}
	return median(ratios)
}

// quantile is the q-th quantile (0 < q <= 1) of sorted durations in ns: the
// smallest sample with at least q of the samples at or below it.
func quantile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return float64(sorted[max(0, min(i, len(sorted)-1))])
}

// rotate returns the indexes 0..n-1 starting at round mod n, so that no
// variant always runs first (or right after the same one) in a round.
func rotate(n, round int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = (round + i) % n
	}
	return idx
}
