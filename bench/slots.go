package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fiberlimit/limiter"
	"github.com/fiberlimit/limiter/quota"
	"github.com/fiberlimit/limiter/storage/redis"
	"github.com/gofiber/fiber/v2"
	goredis "github.com/redis/go-redis/v9"
)

// slotMax is the slots per key of figure 8's Concurrency limiters: more
// than ever run at once, so that every request gets one.
const slotMax = 1_000_000

// Names of figure 8's Concurrency variants.
const (
	vOursSlots   = "ours-concurrency"
	rMwOursSlots = "ours-concurrency [mw]"
	rEngineSlots = "ours-concurrency [engine]"
)

// slotsConfig is the Config of ours' Concurrency in figure 8: slotMax
// slots a key, each held at most a minute.
func slotsConfig() limiter.Config {
	return limiter.Config{Max: slotMax, Expiration: time.Minute, KeyGenerator: headerKey, LimiterMiddleware: limiter.Concurrency{}}
}

// slotsMemVariants are figure 8b's in-memory variants, the baseline
// first: ours' fixed window beside Concurrency.
func slotsMemVariants() []memVariant {
	return []memVariant{
		{name: vBaseline},
		{name: vOursFixed, mw: oursMemory(limiter.FixedWindow{})},
		{name: vOursSlots, mw: func(int) fiber.Handler { return limiter.New(slotsConfig()) }},
	}
}

// slotsRedisVariants are figure 8c's variants, each with keys of its own
// (n distinct ones and a hot one): Concurrency as middleware and as the
// engine's Acquire then Release, beside the fixed window's same two.
func slotsRedisVariants(n int, o options) []*redisVariant {
	return []*redisVariant{
		{rMwOursSlots, "Fiber handler", func(srv *redisServer, pool int) (*redisSession, error) {
			store := redis.New(srv.client(pool))
			cfg := slotsConfig()
			cfg.Name, cfg.Storage, cfg.FailurePolicy, cfg.StorageTimeout = "bench", store, limiter.FailClosed, o.storageTimeout
			return handlerSession(limiter.New(cfg), byteKeys("c:mw:", n), func() { _ = store.Close() }), nil
		}},
		{rEngineSlots, "quota.Concurrency Acquire + Release", func(srv *redisServer, pool int) (*redisSession, error) {
			client := srv.client(pool)
			c, err := quota.NewConcurrency(quota.ConcurrencyConfig{
				Max: slotMax, Expiration: time.Minute, Redis: client, Name: "bench-engine",
				FailurePolicy: quota.FailClosed, StorageTimeout: o.storageTimeout,
			})
			if err != nil {
				_ = client.Close()
				return nil, err
			}
			keys := stringKeys("c:e:", n)
			ctx := context.Background()
			decide := func(i int) error {
				s, err := c.Acquire(ctx, keys[i])
				if err == nil && !s.Allowed() {
					err = fmt.Errorf("rejected (%v)", s.Source())
				}
				if rerr := c.Release(ctx, &s); err == nil {
					err = rerr
				}
				return err
			}
			return &redisSession{func() func(int) error { return decide }, func() { _ = client.Close() }}, nil
		}},
		oursHandlerVariant(rMwOursFixed, limiter.FixedWindow{}, byteKeys("c:fw:", n), o),
		engineVariant(rEngineFixed, quota.FixedWindow, 0, stringKeys("c:efw:", n), o),
	}
}

// commandStats is INFO commandstats: per command (lower case, as
// "evalsha"), its calls and the µs spent executing them.
type commandStats map[string]scriptStats

// readCommandStats reads the server's commandStats since its start.
func readCommandStats(admin *goredis.Client) (commandStats, error) {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := commandStats{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st scriptStats
		for _, field := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats line %q: %w", line, err)
			}
			if k == "calls" {
				st.calls = n
			} else {
				st.usec = n
			}
		}
		stats[cmd] = st
	}
	return stats, nil
}

// slotsUse is what a measurement asked of Redis per decision: script
// calls (EVALSHA and EVAL), ZREM calls, the µs of every command but INFO
// (the reads of these stats), and of those the µs of ZREM.
type slotsUse struct{ scripts, zrems, usec, zremUsec float64 }

// usePerDecision is what the server counted between from and to, per
// decision.
func usePerDecision(from, to commandStats, decisions int64) slotsUse {
	var u slotsUse
	d := float64(decisions)
	for cmd, st := range to {
		calls, usec := st.calls-from[cmd].calls, st.usec-from[cmd].usec
		switch cmd {
		case "info":
			continue
		case "evalsha", "eval":
			u.scripts += calls / d
		case "zrem":
			u.zrems += calls / d
			u.zremUsec += usec / d
		}
		u.usec += usec / d
	}
	return u
}

// slotsResult holds figures 8b (in memory, as figure 1) and 8c (on
// Redis, per decision: rate, commands and Redis CPU, as figure 6b).
type slotsResult struct {
	memCells    []overheadCell
	memVariants []string
	ns          map[cellVariant][]float64
	added       map[cellVariant][]float64
	allocs      map[cellVariant][]float64

	keys        int
	cells       []tpCell
	variants    []string
	rate        map[cellVariant][]float64
	use         map[cellVariant][]slotsUse
	errors      map[cellVariant]int64
	firstErr    map[string]error
	ceilingUsec []float64 // µs per call of the ceiling script, -P 16 run
	ceilingSkip string
}

// runSlots measures figures 8b and 8c. 8b: each round, every in-memory
// variant and the baseline in turn, serial, on one key and many. 8c: each
// round, the ceiling script's µs per call under redis-benchmark -P 16
// (when it is there), then each variant in each column on a Redis emptied
// by FLUSHALL, with INFO commandstats read around it.
func runSlots(o options, srv *redisServer) (*slotsResult, error) {
	memVars := slotsMemVariants()
	res := &slotsResult{
		memCells: []overheadCell{
			{"1 key, serial", [][]byte{[]byte("hot")}, 1},
			{count(o.overheadKeys) + " keys, serial", byteKeys("", o.overheadKeys)[:o.overheadKeys], 1},
		},
		ns: map[cellVariant][]float64{}, added: map[cellVariant][]float64{}, allocs: map[cellVariant][]float64{},
		keys:  o.redisKeys,
		cells: []tpCell{{true, 1}, {true, slices.Max(o.callers)}, {false, slices.Max(o.callers)}},
		rate:  map[cellVariant][]float64{}, use: map[cellVariant][]slotsUse{},
		errors: map[cellVariant]int64{}, firstErr: map[string]error{},
	}
	for _, v := range memVars {
		res.memVariants = append(res.memVariants, v.name)
	}
	redisVars := slotsRedisVariants(o.redisKeys, o)
	for _, v := range redisVars {
		res.variants = append(res.variants, v.name)
	}
	bin := ""
	if o.redisBenchmark != "" {
		bin, _ = exec.LookPath(o.redisBenchmark)
	}
	if bin == "" {
		res.ceilingSkip = "redis-benchmark not found"
	}
	admin := srv.client(1)
	defer func() { _ = admin.Close() }() // it empties Redis and reads its stats
	sha, err := admin.ScriptLoad(context.Background(), ceilingScript).Result()
	if err != nil {
		return nil, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	cursors := make([]atomic.Int64, len(redisVars))
	for round := range o.rounds {
		progressf(o, "8b. Concurrency in memory: round %d/%d", round+1, o.rounds)
		for ci, c := range res.memCells {
			ns := map[string]float64{}
			for _, vi := range rotate(len(memVars), round) {
				v := memVars[vi]
				n, a, err := measureHandler(v.handler(memMax), c.keys, c.workers, o.overheadTime)
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", v.name, c.name, err)
				}
				ns[v.name] = n
				k := cellVariant{ci, v.name}
				res.ns[k] = append(res.ns[k], n)
				res.allocs[k] = append(res.allocs[k], a)
			}
			for _, v := range memVars {
				k := cellVariant{ci, v.name}
				res.added[k] = append(res.added[k], ns[v.name]-ns[v.baseline()])
			}
		}

		progressf(o, "8c. Concurrency on Redis: round %d/%d", round+1, o.rounds)
		if bin != "" {
			st0, err := readScriptStats(admin)
			if err != nil {
				return nil, err
			}
			if _, err := redisBenchmark(bin, srv, sha, o.ceilingRequests, 16); err != nil {
				return nil, err
			}
			st1, err := readScriptStats(admin)
			if err != nil {
				return nil, err
			}
			if d := st1.since(st0); d.calls > 0 {
				res.ceilingUsec = append(res.ceilingUsec, d.usec/d.calls)
			}
		}
		for _, vi := range rotate(len(redisVars), round) {
			v := redisVars[vi]
			for ci, c := range res.cells {
				if err := res.measureRedis(admin, srv, v, ci, c, &cursors[vi], o); err != nil {
					return nil, err
				}
			}
		}
	}
	return res, nil
}

// measureRedis measures v in column c on an emptied Redis. One decision
// on the hot key before the stats are read loads v's script into Redis
// (go-redis's EVALSHA is refused once, then EVAL runs it), so that every
// counted call is one the decisions need.
func (r *slotsResult) measureRedis(admin *goredis.Client, srv *redisServer, v *redisVariant, ci int, c tpCell, cursor *atomic.Int64, o options) error {
	if err := admin.FlushAll(context.Background()).Err(); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	s, err := v.open(srv, c.callers)
	if err != nil {
		return fmt.Errorf("%s: %w", v.name, err)
	}
	defer s.close()
	if err := s.caller()(o.redisKeys); err != nil {
		return fmt.Errorf("%s: first decision: %w", v.name, err)
	}
	key := func() int { return o.redisKeys }
	if c.many {
		key = func() int { return int((cursor.Add(1) - 1) % int64(o.redisKeys)) }
	}
	st0, err := readCommandStats(admin)
	if err != nil {
		return err
	}
	m, err := measure(s, c.callers, o.redisTime, o.redisKeys, key)
	if err != nil {
		return fmt.Errorf("%s, %s: %w", v.name, c.name(r.keys), err)
	}
	st1, err := readCommandStats(admin)
	if err != nil {
		return err
	}
	k := cellVariant{ci, v.name}
	r.rate[k] = append(r.rate[k], m.rate)
	r.use[k] = append(r.use[k], usePerDecision(st0, st1, m.decisions))
	r.errors[k] += m.errors
	if m.firstErr != nil && r.firstErr[v.name] == nil {
		r.firstErr[v.name] = m.firstErr
	}
	return nil
}

// useMedians are the medians over rounds of us's fields.
func useMedians(us []slotsUse) slotsUse {
	var s, z, u, zu []float64
	for _, x := range us {
		s, z, u, zu = append(s, x.scripts), append(z, x.zrems), append(u, x.usec), append(zu, x.zremUsec)
	}
	return slotsUse{median(s), median(z), median(u), median(zu)}
}

// tables renders figures 8b and 8c.
func (r *slotsResult) tables() []*table {
	mem := &table{
		title:  "8b. Concurrency in memory: handler overhead (Fiber app.Handler(), no network, every request admitted)",
		header: []string{"variant"},
		notes: []string{
			"Cells: ns/op beyond the baseline's in the same round (allocs/op), medians over rounds, as figure 1; the baseline row is its own ns/op.",
			fmt.Sprintf("ours-concurrency: limiter.Concurrency{}, Max %s slots a key, Expiration 1 min: a slot taken before the handler and given back after it. ours-fixed: as in figure 1 (10^9 per minute).", count(slotMax)),
			"concurrency / fixed: median over rounds of the two added costs' ratio in the same round.",
		},
	}
	for _, c := range r.memCells {
		mem.header = append(mem.header, c.name)
	}
	for _, v := range r.memVariants {
		row := []string{v}
		for ci := range r.memCells {
			k := cellVariant{ci, v}
			if v == vBaseline {
				row = append(row, fmt.Sprintf("%s ns (%s)", fmtNs(median(r.ns[k]), false), fmtAllocs(median(r.allocs[k]))))
			} else {
				row = append(row, fmt.Sprintf("%s (%s)", fmtNs(median(r.added[k]), true), fmtAllocs(median(r.allocs[k]))))
			}
		}
		mem.add(row...)
	}
	ratio := []string{vOursSlots + " / " + vOursFixed}
	for ci := range r.memCells {
		ratio = append(ratio, fmtRatio(pairedRatio(r.added[cellVariant{ci, vOursSlots}], r.added[cellVariant{ci, vOursFixed}])))
	}
	mem.add(ratio...)

	red := &table{
		title:  "8c. Concurrency on Redis: decisions/s, commands and Redis CPU per request (INFO commandstats)",
		header: []string{"variant", "per second", "scripts / req", "ZREM / req", "Redis µs / req", "of which ZREM", "of ceiling's µs", "failed"},
		notes: []string{
			"scripts: EVALSHA + EVAL calls; Redis µs: the usec of every command but INFO, per request (a Concurrency request is its acquire script and its ZREM). Deltas over each measurement (warm-up included), medians over rounds; each cell on a Redis emptied by FLUSHALL.",
			fmt.Sprintf("[mw]: Fiber middleware on a storage/redis Store, FailClosed; ours-concurrency [engine]: quota.Concurrency Acquire then Release; ours-fixed: 10^9 per minute, as in figures 3 and 6. Keys: %s distinct ones in turn, or one hot key.", count(r.keys)),
		},
	}
	if r.ceilingSkip != "" {
		red.notes = append(red.notes, "ceiling skipped: "+r.ceilingSkip)
	} else {
		red.notes = append(red.notes, "of ceiling's µs: over the bare INCR+PEXPIRE script's µs per call in the same round's redis-benchmark -P 16 run (figure 6), median of per-round ratios.")
		red.add("redis-benchmark -P 16, bare script", "", "1", "0", fmtFloat(median(r.ceilingUsec)), "0", "1.00x", "")
	}
	for _, v := range r.variants {
		for ci, c := range r.cells {
			k := cellVariant{ci, v}
			m := useMedians(r.use[k])
			var perRound []float64
			for _, u := range r.use[k] {
				perRound = append(perRound, u.usec)
			}
			red.add(fmt.Sprintf("%s, %s", v, c.name(r.keys)), fmtRate(median(r.rate[k])), fmtFloat(m.scripts), fmtFloat(m.zrems),
				fmtFloat(m.usec), fmtFloat(m.zremUsec), fmtRatio(pairedRatio(perRound, r.ceilingUsec)), strconv.FormatInt(r.errors[k], 10))
		}
		if e := r.firstErr[v]; e != nil {
			red.notes = append(red.notes, fmt.Sprintf("WARNING: %s: first failure: %v", v, e))
		}
	}
	return []*table{mem, red}
}
