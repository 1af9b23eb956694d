package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// tpCell is one column of figures 3 and 4: the hot key or many keys, and
// the number of concurrent callers.
type tpCell struct {
	many    bool
	callers int
}

// name labels the column, e.g. "hot ×8" or "100k ×64".
func (c tpCell) name(keys int) string {
	k := "hot"
	if c.many {
		k = count(keys)
	}
	return fmt.Sprintf("%s ×%d", k, c.callers)
}

// measurement is what one run of a variant in one column gave.
type measurement struct {
	rate      float64 // admitted decisions per second
	decisions int64   // decisions made, warm-up included
	p50, p99  float64 // latency of a decision, ns
	errors    int64   // decisions that failed or were rejected
	firstErr  error
}

// measure runs callers goroutines, each with its own decide function from
// s, for about d, and records every decision's duration. key gives each
// decision's key index. Each goroutine first makes two decisions on hot
// (opening connections, loading scripts); the clock starts when all have.
func measure(s *redisSession, callers int, d time.Duration, hot int, key func() int) (measurement, error) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var stop atomic.Bool
	lats := make([][]int64, callers)
	errs := make([]int64, callers)
	firstErr := make([]error, callers)
	for g := range callers {
		decide := s.caller()
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			var warm error
			for range 2 {
				if err := decide(hot); err != nil && warm == nil {
					warm = fmt.Errorf("warm-up: %w", err)
				}
			}
			ready.Done()
			<-start
			if warm != nil {
				errs[g], firstErr[g] = 1, warm
				return
			}
			lat := make([]int64, 0, 4096)
			for !stop.Load() {
				t0 := time.Now()
				err := decide(key())
				lat = append(lat, int64(time.Since(t0)))
				if err != nil {
					errs[g]++
					if firstErr[g] == nil {
						firstErr[g] = err
					}
				}
			}
			lats[g] = lat
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	stop.Store(true)
	done.Wait()
	elapsed := time.Since(t0)
	all := slices.Concat(lats...)
	slices.Sort(all)
	var m measurement
	for g := range callers {
		m.errors += errs[g]
		if m.firstErr == nil {
			m.firstErr = firstErr[g]
		}
	}
	ok := int64(len(all)) - m.errors
	m.decisions = int64(len(all)) + 2*int64(callers)
	if ok <= 0 {
		if m.firstErr == nil {
			m.firstErr = errors.New("no decision completed")
		}
		return m, m.firstErr
	}
	m.rate = float64(ok) / elapsed.Seconds()
	m.p50, m.p99 = quantile(all, 0.50), quantile(all, 0.99)
	return m, nil
}

// throughputResult holds figures 3 and 4, one sample per round for each
// column and variant, and the errors seen per variant.
type throughputResult struct {
	keys     int
	cells    []tpCell
	variants []*redisVariant
	rate     map[cellVariant][]float64
	cpu      map[cellVariant][]float64 // Redis's main-thread CPU per decision, µs
	p50, p99 map[cellVariant][]float64
	errors   map[string]int64
	firstErr map[string]error
}

// runThroughput measures figures 3 and 4: in each round, for each column,
// every variant in turn, with a fresh client (pool = callers) each time.
// Hot-key columns use the variant's one hot key; many-key columns walk the
// variant's n keys with a cursor that carries on across columns and rounds.
func runThroughput(o options, srv *redisServer) (*throughputResult, error) {
	n := o.redisKeys
	res := &throughputResult{
		keys: n, variants: redisVariants(n, o),
		rate: map[cellVariant][]float64{}, cpu: map[cellVariant][]float64{}, p50: map[cellVariant][]float64{}, p99: map[cellVariant][]float64{},
		errors: map[string]int64{}, firstErr: map[string]error{},
	}
	for _, many := range []bool{false, true} {
		for _, c := range o.callers {
			res.cells = append(res.cells, tpCell{many, c})
		}
	}
	admin := srv.client(1)
	defer func() { _ = admin.Close() }() // it only resets and reads the server's stats
	cursors := make([]atomic.Int64, len(res.variants))
	for round := range o.rounds {
		progressf(o, "3-4. Redis decisions/s and latency: round %d/%d", round+1, o.rounds)
		for ci, c := range res.cells {
			for _, vi := range rotate(len(res.variants), round) {
				v := res.variants[vi]
				key := func() int { return n }
				if c.many {
					cur := &cursors[vi]
					key = func() int { return int((cur.Add(1) - 1) % int64(n)) }
				}
				s, err := v.open(srv, c.callers)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				cpu0, cpuErr := redisCPU(admin)
				m, err := measure(s, c.callers, o.redisTime, n, key)
				cpu1, cpuErr1 := redisCPU(admin)
				s.close()
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", v.name, c.name(n), err)
				}
				k := cellVariant{ci, v.name}
				if cpuErr == nil && cpuErr1 == nil && m.decisions > 0 {
					res.cpu[k] = append(res.cpu[k], (cpu1-cpu0)*1e6/float64(m.decisions))
				}
				res.rate[k] = append(res.rate[k], m.rate)
				res.p50[k] = append(res.p50[k], m.p50)
				res.p99[k] = append(res.p99[k], m.p99)
				res.errors[v.name] += m.errors
				if m.firstErr != nil && res.firstErr[v.name] == nil {
					res.firstErr[v.name] = m.firstErr
				}
			}
		}
	}
	return res, nil
}

// errorNotes lists the variants that had failed or rejected decisions.
func (r *throughputResult) errorNotes() []string {
	var notes []string
	for _, v := range r.variants {
		if e := r.errors[v.name]; e > 0 {
			notes = append(notes, fmt.Sprintf("WARNING: %s had %d failed decisions (first: %v); rates count admitted decisions only.", v.name, e, r.firstErr[v.name]))
		}
	}
	return notes
}

// tables renders figure 3 (decisions/s and ratios) and figure 4 (latency
// and ratios).
func (r *throughputResult) tables() []*table {
	header := func(first ...string) []string {
		h := first
		for _, c := range r.cells {
			h = append(h, c.name(r.keys))
		}
		return h
	}
	rates := &table{
		title:  "3. Redis decisions per second (hot = one key; " + count(r.keys) + " = distinct keys in turn; ×N = concurrent callers)",
		header: header("variant", "via"),
		notes: append([]string{
			"Median over rounds of admitted decisions/s; limit 10^9 per minute, so every decision is admitted, but in the Max 100 rows: 100 per 10 ms, where the hot key's state is always full (a log of 100 entries) and most of its decisions, counted too, are rejections. A fresh client per measurement, pool size = callers.",
			"ours-* pipeline concurrent calls by default (storage/redis), and decide the calls a pipeline carries to one node in one batch-script call per algorithm and slot; -unbatched uses redis.WithoutBatching() (a script call per decision, pipelined); -unpipelined uses redis.WithoutPipelining(). [mw] = Fiber middleware via app.Handler(), no network.",
			"redis_rate [autopipeline]: redis_rate over go-redis's experimental Client.AutoPipeline() (v9.22+), which pipelines concurrent commands of any kind.",
			"ours [mw] = limiter.Config{Storage: redis.New(client)} on a default go-redis client, FailClosed; -ctxtimeout: the client has ContextTimeoutEnabled, which spares the limiter's per-call timeout goroutine.",
			fmt.Sprintf("ours-* [engine] = quota.Limiter.Take, FailClosed; ours-*-lease = the same with Config.Lease %v (a fresh Limiter per cell: the hot key's shares grow from nothing, each of the %s keys is seen once and decided in Redis; a token bucket that never binds cannot lease, see figure 6).", benchLease, count(r.keys)),
		}, r.errorNotes()...),
	}
	lat := &table{
		title:  "4. Redis latency per decision, p50 / p99 in µs",
		header: header("variant"),
		notes:  []string{"Every decision's duration, as the caller sees it; median over rounds of each round's p50 and p99."},
	}
	for _, v := range r.variants {
		row := []string{v.name, v.via}
		lrow := []string{v.name}
		for ci := range r.cells {
			k := cellVariant{ci, v.name}
			row = append(row, fmtRate(median(r.rate[k])))
			lrow = append(lrow, fmtMicros(median(r.p50[k]))+" / "+fmtMicros(median(r.p99[k])))
		}
		rates.add(row...)
		lat.add(lrow...)
	}
	rateRatio := &table{
		title:  "3b. Decisions/s, ours / peer (above 1: ours decides more per second)",
		header: header("ours / peer"),
		notes:  []string{"Median over rounds of the ratio within each round (the variants of a round run back to back)."},
	}
	latRatio := &table{
		title:  "4b. Latency, ours / peer as p50 ratio / p99 ratio (below 1: ours answers sooner)",
		header: header("ours / peer"),
	}
	for _, p := range redisPairs {
		row := []string{p[0] + " / " + p[1]}
		lrow := []string{p[0] + " / " + p[1]}
		for ci := range r.cells {
			a, b := cellVariant{ci, p[0]}, cellVariant{ci, p[1]}
			row = append(row, fmtRatio(pairedRatio(r.rate[a], r.rate[b])))
			lrow = append(lrow, fmtRatio(pairedRatio(r.p50[a], r.p50[b]))+" / "+fmtRatio(pairedRatio(r.p99[a], r.p99[b])))
		}
		rateRatio.add(row...)
		latRatio.add(lrow...)
	}
	cpu := &table{
		title:  "3c. Redis CPU per decision, µs (main thread, INFO cpu)",
		header: header("variant"),
		notes: []string{
			"used_cpu_user_main_thread + used_cpu_sys_main_thread over the measurement, per decision made; median over rounds. The server's own cost: parsing, dispatch, scripts, replies.",
			"ours-* decide the calls a pipeline carries to one node in one batch-script call per algorithm (storage/redis); unpipelined, each call is its own.",
		},
	}
	for _, v := range r.variants {
		row := []string{v.name}
		for ci := range r.cells {
			row = append(row, fmt.Sprintf("%.1f", median(r.cpu[cellVariant{ci, v.name}])))
		}
		cpu.add(row...)
	}
	return []*table{rates, rateRatio, cpu, lat, latRatio}
}

// redisCPU is the CPU time, in seconds, the server's main thread has used
// (user and system), from INFO cpu; the whole server's on a Redis without
// the per-thread fields.
func redisCPU(admin *goredis.Client) (float64, error) {
	info, err := admin.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, err
	}
	fields := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			fields[k] = f
		}
	}
	if u, ok := fields["used_cpu_user_main_thread"]; ok {
		return u + fields["used_cpu_sys_main_thread"], nil
	}
	return fields["used_cpu_user"] + fields["used_cpu_sys"], nil
}

// touchEvery makes one decision for each of the n keys, from callers
// goroutines, before a many-key cell is measured, and returns how many
// failed (a storage timeout on a loaded machine, a breaker open): those
// keys stay new.
func touchEvery(s *redisSession, callers, n int) int64 {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		decide := s.caller()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if decide(i) != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return failed.Load()
}
