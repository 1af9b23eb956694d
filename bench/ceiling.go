package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ceilingScript is the smallest useful rate-limit script: a fixed-window
// counter. redis-benchmark runs it to show what this Redis can do at most.
const ceilingScript = `local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n`

// rpsRE finds redis-benchmark's result in -q output.
var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

// ceilingVariants are the Redis variants set against the ceiling.
var ceilingVariants = []string{
	rOursFixed, rOursSliding, rOursToken, rOursLog, rOursFixedUnbatch, rOursFixedUnpiped, rRedisRate, rRedisRateAuto,
	rEngineFixed, rEngineSliding, rEngineToken, rOursFixedLease, rOursSlidingLease, rOursTokenLease,
}

// leasePairs set each lease row against the same call without a lease.
var leasePairs = [][2]string{
	{rOursFixedLease, rEngineFixed},
	{rOursSlidingLease, rEngineSliding},
	{rOursTokenLease, rEngineToken},
}

// ceilingResult holds figure 6: per round, redis-benchmark's requests/s
// without and with -P 16, and each variant's decisions/s at the most
// callers over many keys and on one hot key; and from INFO commandstats,
// the script calls and their µs per decision, and the ceiling script's
// own µs per call in the -P 16 run.
type ceilingResult struct {
	skipped    string // why the figure was not measured, or ""
	requests   int
	callers    int
	keys       int
	plain      []float64
	pipelined  []float64
	scriptUsec []float64            // µs per call of the ceiling script, -P 16 run
	rate       map[string][]float64 // over many keys
	hot        map[string][]float64 // on the variant's hot key
	// Per decision, over many keys and on the hot key: script calls, and
	// the µs Redis spent in them.
	calls, usec       map[string][]float64
	hotCalls, hotUsec map[string][]float64
	// This process's CPU (getrusage: the callers, go-redis and the
	// limiter) per decision, µs, over many keys.
	clientUsec map[string][]float64
}

// scriptStats is what INFO commandstats counts of script calls (EVALSHA
// and EVAL): calls, and µs spent executing them.
type scriptStats struct{ calls, usec float64 }

// readScriptStats reads the server's scriptStats since its start (or its
// last CONFIG RESETSTAT).
func readScriptStats(admin *goredis.Client) (scriptStats, error) {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return scriptStats{}, err
	}
	var st scriptStats
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name != "cmdstat_evalsha" && name != "cmdstat_eval" || !ok {
			continue
		}
		for _, field := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, err := strconv.ParseFloat(v, 64)
			switch {
			case k != "calls" && k != "usec":
				continue
			case err != nil:
				return scriptStats{}, fmt.Errorf("commandstats line %q: %w", line, err)
			case k == "calls":
				st.calls += n
			default:
				st.usec += n
			}
		}
	}
	return st, nil
}

// since is what the server counted between from and st.
func (st scriptStats) since(from scriptStats) scriptStats {
	return scriptStats{st.calls - from.calls, st.usec - from.usec}
}

// redisBenchmark runs bin against srv with the ceiling script's sha and
// returns its requests per second.
func redisBenchmark(bin string, srv *redisServer, sha string, requests, pipeline int) (float64, error) {
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(srv.port), "-c", "50", "-n", strconv.Itoa(requests), "-r", "100000", "-q"}
	if pipeline > 1 {
		args = append(args, "-P", strconv.Itoa(pipeline))
	}
	args = append(args, "EVALSHA", sha, "1", "k:__rand_int__", "60000")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	dieWithParent(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", bin, err, out)
	}
	m := rpsRE.FindAllSubmatch(out, -1)
	if m == nil {
		return 0, fmt.Errorf("%s: no requests per second in %q", bin, out)
	}
	return strconv.ParseFloat(string(m[len(m)-1][1]), 64)
}

// runCeiling measures figure 6, skipped without redis-benchmark. Each
// round runs redis-benchmark without and with pipelining, then each
// variant at the most callers over many keys, back to back.
func runCeiling(o options, srv *redisServer) (*ceilingResult, error) {
	res := &ceilingResult{
		requests: o.ceilingRequests, callers: slices.Max(o.callers), keys: o.redisKeys,
		rate: map[string][]float64{}, hot: map[string][]float64{},
		calls: map[string][]float64{}, usec: map[string][]float64{},
		hotCalls: map[string][]float64{}, hotUsec: map[string][]float64{},
		clientUsec: map[string][]float64{},
	}
	bin := ""
	if o.redisBenchmark != "" {
		bin, _ = exec.LookPath(o.redisBenchmark)
	}
	if bin == "" {
		res.skipped = "redis-benchmark not found"
		return res, nil
	}
	admin := srv.client(1)
	defer func() { _ = admin.Close() }() // it loads the script and reads the server's stats
	sha, err := admin.ScriptLoad(context.Background(), ceilingScript).Result()
	if err != nil {
		return nil, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	var variants []*redisVariant
	for _, v := range redisVariants(o.redisKeys, o) {
		if slices.Contains(ceilingVariants, v.name) {
			variants = append(variants, v)
		}
	}
	cursors := make([]atomic.Int64, len(variants))
	for round := range o.rounds {
		progressf(o, "6. redis-benchmark ceiling: round %d/%d", round+1, o.rounds)
		plain, err := redisBenchmark(bin, srv, sha, o.ceilingRequests, 1)
		if err != nil {
			return nil, err
		}
		st0, err := readScriptStats(admin)
		if err != nil {
			return nil, err
		}
		piped, err := redisBenchmark(bin, srv, sha, o.ceilingRequests, 16)
		if err != nil {
			return nil, err
		}
		st1, err := readScriptStats(admin)
		if err != nil {
			return nil, err
		}
		res.plain = append(res.plain, plain)
		res.pipelined = append(res.pipelined, piped)
		if d := st1.since(st0); d.calls > 0 {
			res.scriptUsec = append(res.scriptUsec, d.usec/d.calls)
		}
		for vi, v := range variants {
			cur := &cursors[vi]
			many := func() int { return int((cur.Add(1) - 1) % int64(o.redisKeys)) }
			hot := func() int { return o.redisKeys }
			for _, cell := range []struct {
				key               func() int
				rate, calls, usec map[string][]float64
				client            map[string][]float64
			}{{many, res.rate, res.calls, res.usec, res.clientUsec}, {hot, res.hot, res.hotCalls, res.hotUsec, nil}} {
				// Each cell on an empty Redis: the keys of the cells before
				// it (100k a many-key cell, living a minute) would make a
				// larger keyspace for the variants measured later in a round.
				if err := admin.FlushAll(context.Background()).Err(); err != nil {
					return nil, fmt.Errorf("FLUSHALL: %w", err)
				}
				s, err := v.open(srv, res.callers)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				if cell.client != nil {
					// Every key once first, as redis-benchmark's keys are
					// there when its -P 16 run starts: the cell then
					// measures keys that come back, as a client's do.
					if failed := touchEvery(s, res.callers, o.redisKeys); failed > 0 {
						progressf(o, "6. %s: %d of %d keys' first takes failed; they stay new", v.name, failed, o.redisKeys)
					}
				}
				st0, err0 := readScriptStats(admin)
				cpu0 := processCPU()
				m, err := measure(s, res.callers, o.redisTime, o.redisKeys, cell.key)
				cpu := processCPU() - cpu0
				st1, err1 := readScriptStats(admin)
				s.close()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				if cell.client != nil && m.decisions > 0 {
					cell.client[v.name] = append(cell.client[v.name], cpu.Seconds()*1e6/float64(m.decisions))
				}
				cell.rate[v.name] = append(cell.rate[v.name], m.rate)
				if err0 == nil && err1 == nil && m.decisions > 0 {
					d := st1.since(st0)
					cell.calls[v.name] = append(cell.calls[v.name], d.calls/float64(m.decisions))
					cell.usec[v.name] = append(cell.usec[v.name], d.usec/float64(m.decisions))
				}
			}
		}
	}
	return res, nil
}

// tables renders figure 6: decisions/s against the ceiling (6), script
// calls and Redis CPU per decision (6b), and leases against the same call
// without (6c).
func (r *ceilingResult) tables() []*table {
	t := &table{
		title: "6. Ceiling: redis-benchmark running a bare INCR+PEXPIRE script (EVALSHA) on the same Redis",
		header: []string{"what", "per second", "of -P 16", "of no -P", "Redis CPU µs / decision", "CPU of -P 16's",
			"client CPU µs / decision", "hot key, per second", "hot, of -P 16"},
	}
	if r.skipped != "" {
		t.notes = []string{"skipped: " + r.skipped}
		return []*table{t}
	}
	t.notes = []string{
		fmt.Sprintf("redis-benchmark -c 50 -n %d -r 100000 -q EVALSHA <sha> 1 k:__rand_int__ 60000, with and without -P 16; it shares the cores with Redis, as our callers do.", r.requests),
		fmt.Sprintf("Variants: %d callers over %s keys, and on one hot key, in the same rounds, each cell on a Redis emptied by FLUSHALL; fractions are medians of per-round ratios. Before a many-key cell every key is taken from once, unmeasured, as redis-benchmark's keys are there from its run without -P when its -P 16 run starts (a token bucket under a limit it never reaches needs its key for 1 ms, so its keys are new again).", r.callers, count(r.keys)),
		"Redis CPU: the µs Redis spent in script calls (INFO commandstats, EVALSHA + EVAL) per decision, over many keys; \"CPU of -P 16's\" divides it by the bare script's µs per call in the same round's -P 16 run (6b has the hot key's). Client CPU: this process's CPU time (getrusage, user + system: the callers, go-redis, the limiter, and the benchmark's own timing of each decision) per decision over many keys.",
		"ours-fixed, ours-sliding, ours-token: a storage/redis Store's engine, Take of 1 under 10^9 a minute; ours-log: SlidingLog under its largest limit, 10,000 a minute, which over many keys admits every take and on the hot key rejects most (rejections are decisions).",
		fmt.Sprintf("-lease: quota.Limiter.Take with Config.Lease %v; [engine]: the same call without Lease. Limit 10^9 per minute: it never binds, and never caps a share (at most half the room left), so the hot-key cells measure decision speed. A fresh Limiter per cell: over %s keys each key is taken from once before the cell and about once in it (decided in Redis), and the hot key's shares grow from nothing within the cell.", benchLease, count(r.keys)),
	}
	t.add("redis-benchmark, no pipelining", fmtRate(median(r.plain)), fmtRatio(pairedRatio(r.plain, r.pipelined)), "1.00x", "", "", "", "", "")
	t.add("redis-benchmark -P 16", fmtRate(median(r.pipelined)), "1.00x", fmtRatio(pairedRatio(r.pipelined, r.plain)),
		fmtFloat(median(r.scriptUsec)), "1.00x", "", "", "")
	for _, v := range ceilingVariants {
		t.add(fmt.Sprintf("%s ×%d", v, r.callers), fmtRate(median(r.rate[v])),
			fmtRatio(pairedRatio(r.rate[v], r.pipelined)), fmtRatio(pairedRatio(r.rate[v], r.plain)),
			fmtFloat(median(r.usec[v])), fmtRatio(pairedRatio(r.usec[v], r.scriptUsec)), fmtFloat(median(r.clientUsec[v])),
			fmtRate(median(r.hot[v])), fmtRatio(pairedRatio(r.hot[v], r.pipelined)))
	}

	cpu := &table{
		title: "6b. Script calls and Redis CPU per decision (INFO commandstats, EVALSHA + EVAL)",
		header: []string{"what", "calls / decision", "µs / decision", "of ceiling's µs",
			"hot, calls / decision", "hot, µs / decision", "hot, of ceiling's µs"},
		notes: []string{
			"Deltas of INFO commandstats (calls, usec of evalsha and eval) over each measurement, divided by its decisions (warm-up included); median over rounds. usec is the time Redis spent executing the scripts, not reading or answering.",
			"The ceiling's µs is the bare script's µs per call in the same round's redis-benchmark -P 16 run; \"of ceiling's µs\" is the median of per-round ratios.",
			fmt.Sprintf("A share's unused units go back when its lease ends (%v), after the cell: that one call per hot key is not counted.", benchLease),
		},
	}
	cpu.add("redis-benchmark -P 16", "1", fmtFloat(median(r.scriptUsec)), "1.00x", "", "", "")
	for _, v := range ceilingVariants {
		cpu.add(fmt.Sprintf("%s ×%d", v, r.callers),
			fmtFloat(median(r.calls[v])), fmtFloat(median(r.usec[v])), fmtRatio(pairedRatio(r.usec[v], r.scriptUsec)),
			fmtFloat(median(r.hotCalls[v])), fmtFloat(median(r.hotUsec[v])), fmtRatio(pairedRatio(r.hotUsec[v], r.scriptUsec)))
	}

	lease := &table{
		title:  "6c. Leases: decisions/s with Lease / without (the same quota.Limiter.Take call)",
		header: []string{"lease / exact", fmt.Sprintf("%s keys ×%d", count(r.keys), r.callers), fmt.Sprintf("hot ×%d", r.callers)},
		notes:  []string{"Median of per-round ratios; above 1, the lease decides more per second."},
	}
	for _, p := range leasePairs {
		lease.add(p[0]+" / "+p[1], fmtRatio(pairedRatio(r.rate[p[0]], r.rate[p[1]])), fmtRatio(pairedRatio(r.hot[p[0]], r.hot[p[1]])))
	}
	return []*table{t, cpu, lease}
}
