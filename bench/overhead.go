package main

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// memMax is the limit of the in-memory overhead figure: high enough that
// every request is admitted.
const memMax = 1_000_000_000

// overheadCell is one column of the in-memory overhead figure: a key set
// and how many goroutines send requests.
type overheadCell struct {
	name    string
	keys    [][]byte
	workers int
}

// cellVariant indexes per-round samples by column and variant.
type cellVariant struct {
	cell    int
	variant string
}

// overheadResult holds figure 1: per column and variant, one sample per
// round of ns/op, of ns/op beyond the baseline's in the same round, and of
// allocations per op.
type overheadResult struct {
	cells    []overheadCell
	variants []string
	ns       map[cellVariant][]float64
	added    map[cellVariant][]float64
	allocs   map[cellVariant][]float64
}

// measureHandler sends requests through h from workers goroutines, each
// with its own reused request context, for about d, and returns the wall
// time per request (as testing's RunParallel reports it) and the heap
// allocations per request. Every key is requested once before the clock
// starts, so the measured requests find their key tracked.
func measureHandler(h fasthttp.RequestHandler, keys [][]byte, workers int, d time.Duration) (nsPerOp, allocsPerOp float64, err error) {
	reqs := make([]*request, workers)
	for w := range reqs {
		reqs[w] = newRequest()
	}
	for _, k := range keys {
		if code := reqs[0].serve(h, k); code != fiber.StatusOK {
			return 0, 0, fmt.Errorf("warm-up: status %d, want 200", code)
		}
	}
	runtime.GC()
	var stop atomic.Bool
	var bad atomic.Int64 // a status other than 200
	counts := make([]int64, workers)
	var wg sync.WaitGroup
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func(req *request, i int) {
			defer wg.Done()
			n := int64(0)
			for !stop.Load() {
				for range 256 {
					if code := req.serve(h, keys[i%len(keys)]); code != fiber.StatusOK {
						bad.Store(int64(code))
					}
					i++
				}
				n += 256
			}
			counts[w] = n
		}(reqs[w], w*7919)
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if code := bad.Load(); code != 0 {
		return 0, 0, fmt.Errorf("status %d, want 200", code)
	}
	var ops int64
	for _, n := range counts {
		ops += n
	}
	if ops == 0 {
		return 0, 0, errors.New("no request completed")
	}
	return float64(elapsed.Nanoseconds()) / float64(ops), float64(after.Mallocs-before.Mallocs) / float64(ops), nil
}

// runOverhead measures figure 1: each round runs every in-memory variant
// and the baseline in turn, for each column.
func runOverhead(o options) (*overheadResult, error) {
	variants := memVariants()
	hot := [][]byte{[]byte("hot")}
	many := byteKeys("", o.overheadKeys)[:o.overheadKeys]
	par := runtime.GOMAXPROCS(0)
	manyName := fmt.Sprintf("%s keys", count(o.overheadKeys))
	res := &overheadResult{
		cells: []overheadCell{
			{"1 key, serial", hot, 1},
			{fmt.Sprintf("1 key, parallel(%d)", par), hot, par},
			{manyName + ", serial", many, 1},
			{fmt.Sprintf("%s, parallel(%d)", manyName, par), many, par},
		},
		ns:     map[cellVariant][]float64{},
		added:  map[cellVariant][]float64{},
		allocs: map[cellVariant][]float64{},
	}
	for _, v := range variants {
		res.variants = append(res.variants, v.name)
	}
	for round := range o.rounds {
		progressf(o, "1. in-memory overhead: round %d/%d", round+1, o.rounds)
		for ci, c := range res.cells {
			ns := map[string]float64{}
			for _, vi := range rotate(len(variants), round) {
				v := variants[vi]
				n, a, err := measureHandler(v.handler(memMax), c.keys, c.workers, o.overheadTime)
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", v.name, c.name, err)
				}
				ns[v.name] = n
				k := cellVariant{ci, v.name}
				res.ns[k] = append(res.ns[k], n)
				res.allocs[k] = append(res.allocs[k], a)
			}
			for _, v := range variants {
				k := cellVariant{ci, v.name}
				res.added[k] = append(res.added[k], ns[v.name]-ns[v.baseline()])
			}
		}
	}
	return res, nil
}

// fmtAllocs writes allocations per op, 0 when below 0.005.
func fmtAllocs(a float64) string {
	if a < 0.005 {
		return "0"
	}
	return fmt.Sprintf("%.2f", a)
}

// tables renders figure 1: the added cost per variant, then ours' added
// cost as a multiple of each peer's.
func (r *overheadResult) tables() []*table {
	abs := &table{
		title:  "1. In-memory handler overhead (Fiber app.Handler(), no network, every request admitted)",
		header: []string{"variant"},
		notes: []string{
			"Cells: ns/op beyond the baseline's in the same round (allocs/op), medians over rounds; the baseline row is its own ns/op.",
			"parallel(N): N goroutines, wall time per request. ulule has no Fiber middleware: a minimal adapter (ulule's fasthttp way) is measured.",
			"Limits: 10^9 per minute; ours-token: Burst 10^9 refilled at 1000 per minute, so buckets stay below full (a full bucket's entry is reclaimed and re-created).",
		},
	}
	for _, c := range r.cells {
		abs.header = append(abs.header, c.name)
	}
	for _, v := range r.variants {
		row := []string{v}
		for ci := range r.cells {
			k := cellVariant{ci, v}
			a := median(r.allocs[k])
			if v == vBaseline || v == vV3Baseline {
				row = append(row, fmt.Sprintf("%s ns (%s)", fmtNs(median(r.ns[k]), false), fmtAllocs(a)))
			} else {
				row = append(row, fmt.Sprintf("%s (%s)", fmtNs(median(r.added[k]), true), fmtAllocs(a)))
			}
		}
		abs.add(row...)
	}
	ratio := &table{
		title:  "1b. In-memory added cost, ours / peer (below 1: ours adds less)",
		header: []string{"ours vs peer"},
		notes: []string{
			"Median over rounds of (ours' added ns/op) / (peer's added ns/op) in the same round.",
			"floor / fiber-fixed: a middleware that only reads the key and sets the three headers, formatting each value per request, over Fiber's limiter. Ours sets the values it knows (its Max, numbers below 10,000) from text made once, so its headers cost less than the floor's.",
			"v3 rows: Fiber v3 apps, their added cost over the bare v3 app; v3 ours-fixed / ours-fixed compares the v3 middleware's added cost with the v2 middleware's.",
		},
	}
	for _, c := range r.cells {
		ratio.header = append(ratio.header, c.name)
	}
	for _, p := range memPairs {
		row := []string{p[0] + " / " + p[1]}
		for ci := range r.cells {
			row = append(row, fmtRatio(pairedRatio(r.added[cellVariant{ci, p[0]}], r.added[cellVariant{ci, p[1]}])))
		}
		ratio.add(row...)
	}
	return []*table{abs, ratio}
}

// maxAllocs is the largest median allocs/op of variant over the columns.
func (r *overheadResult) maxAllocs(variant string) float64 {
	m := math.Inf(-1)
	for ci := range r.cells {
		m = max(m, median(r.allocs[cellVariant{ci, variant}]))
	}
	return m
}
