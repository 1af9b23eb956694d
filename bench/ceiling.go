package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// ceilingScript is the smallest useful rate-limit script: a fixed-window
// counter. redis-benchmark runs it to show what this Redis can do at most.
const ceilingScript = `local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end return n`

// rpsRE finds redis-benchmark's result in -q output.
var rpsRE = regexp.MustCompile(`([0-9.]+) requests per second`)

// ceilingVariants are the Redis variants set against the ceiling.
var ceilingVariants = []string{rOursFixed, rOursFixedUnbatch, rOursFixedUnpiped, rRedisRate, rRedisRateAuto}

// ceilingResult holds figure 6: per round, redis-benchmark's requests/s
// without and with -P 16, and each variant's decisions/s at the most
// callers over many keys and on one hot key.
type ceilingResult struct {
	skipped   string // why the figure was not measured, or ""
	requests  int
	callers   int
	keys      int
	plain     []float64
	pipelined []float64
	rate      map[string][]float64 // over many keys
	hot       map[string][]float64 // on the variant's hot key
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
	}
	bin := ""
	if o.redisBenchmark != "" {
		bin, _ = exec.LookPath(o.redisBenchmark)
	}
	if bin == "" {
		res.skipped = "redis-benchmark not found"
		return res, nil
	}
	client := srv.client(1)
	sha, err := client.ScriptLoad(context.Background(), ceilingScript).Result()
	_ = client.Close()
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
		piped, err := redisBenchmark(bin, srv, sha, o.ceilingRequests, 16)
		if err != nil {
			return nil, err
		}
		res.plain = append(res.plain, plain)
		res.pipelined = append(res.pipelined, piped)
		for vi, v := range variants {
			cur := &cursors[vi]
			many := func() int { return int((cur.Add(1) - 1) % int64(o.redisKeys)) }
			hot := func() int { return o.redisKeys }
			for _, cell := range []struct {
				key  func() int
				into map[string][]float64
			}{{many, res.rate}, {hot, res.hot}} {
				s, err := v.open(srv, res.callers)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				m, err := measure(s, res.callers, o.redisTime, o.redisKeys, cell.key)
				s.close()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				cell.into[v.name] = append(cell.into[v.name], m.rate)
			}
		}
	}
	return res, nil
}

// tables renders figure 6.
func (r *ceilingResult) tables() []*table {
	t := &table{
		title:  "6. Ceiling: redis-benchmark running a bare INCR+PEXPIRE script (EVALSHA) on the same Redis",
		header: []string{"what", "per second", "of -P 16", "of no -P", "hot key, per second", "hot, of -P 16"},
	}
	if r.skipped != "" {
		t.notes = []string{"skipped: " + r.skipped}
		return []*table{t}
	}
	t.notes = []string{
		fmt.Sprintf("redis-benchmark -c 50 -n %d -r 100000 -q EVALSHA <sha> 1 k:__rand_int__ 60000, with and without -P 16; it shares the cores with Redis, as our callers do.", r.requests),
		fmt.Sprintf("Variants: %d callers over %s keys, and on one hot key, in the same rounds; fractions are medians of per-round ratios.", r.callers, count(r.keys)),
	}
	t.add("redis-benchmark, no pipelining", fmtRate(median(r.plain)), fmtRatio(pairedRatio(r.plain, r.pipelined)), "1.00x", "", "")
	t.add("redis-benchmark -P 16", fmtRate(median(r.pipelined)), "1.00x", fmtRatio(pairedRatio(r.pipelined, r.plain)), "", "")
	for _, v := range ceilingVariants {
		t.add(fmt.Sprintf("%s ×%d", v, r.callers), fmtRate(median(r.rate[v])),
			fmtRatio(pairedRatio(r.rate[v], r.pipelined)), fmtRatio(pairedRatio(r.rate[v], r.plain)),
			fmtRate(median(r.hot[v])), fmtRatio(pairedRatio(r.hot[v], r.pipelined)))
	}
	return []*table{t}
}
