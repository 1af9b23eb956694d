package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fiberlimit/limiter/internal/redistest"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// zzSeeds is how many seeds each differential config runs (ZZ_SEEDS).
func zzSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("ZZ_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 2
}

func zzSteps() int {
	if n, err := strconv.Atoi(os.Getenv("ZZ_STEPS")); err == nil && n > 0 {
		return n
	}
	return 3000
}

// RT: memory vs Redis vs Storage on long random traces of SlidingLog under
// 2-4 limits: takes of 0..Max+2, TakeUpTo, refunds of earlier admitted
// takes (any cost, any order, also after their entries left), Penalize,
// Reward, BlockFor and MinInterval, small steps and huge jumps.
func TestZZLogDifferential(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, 13 * time.Second, time.Hour, 30 * 24 * time.Hour}
	for seed := range zzSeeds() {
		for ki, kr := range []struct {
			name       string
			block, gap int64
		}{{"plain", 0, 0}, {"block", 250, 0}, {"gap", 0, 40}, {"both", 3000, 5}} {
			rng := rand.New(rand.NewPCG(uint64(seed), 0xbeef+uint64(ki)))
			n := 2 + rng.IntN(3)
			ws := slices.Clone(windows)
			rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
			ls := limits{n: n, block: kr.block, gap: kr.gap}
			var desc []string
			for i := range n {
				limit := int64(1 + rng.IntN(50))
				if rng.IntN(4) == 0 {
					limit = int64(1 + rng.IntN(3))
				}
				ls.r[i] = newRule(limit, limit, ws[i], limit)
				desc = append(desc, fmt.Sprintf("%d/%v", limit, ws[i]))
			}
			name := fmt.Sprintf("seed%d/%s/%s", seed, kr.name, strings.Join(desc, ","))
			t.Run(name, func(t *testing.T) {
				zzDifferential(t, client, ls, rng, name)
			})
		}
	}
}

type zzHeld struct {
	v    Result
	cost int64
}

func zzDifferential(t *testing.T, client *goredis.Client, ls limits, rng *rand.Rand, name string) {
	const base = int64(1_700_000_000_000)
	clock := newTraceClock(base)
	mem := testManager(SlidingLog, ls, 1<<20, clock.millis)
	red := newRedisBackend(client, nil, SlidingLog, "zzdiff:"+name+":", &Config{clock: clock.millis})
	sto := newStorageBackend(&mapStorage{m: map[string][]byte{}}, SlidingLog, "zzdiff:", clock.millis)
	ctx := context.Background()
	held := map[string][]zzHeld{}
	maxLimit := int64(0)
	minWindow := ls.r[0].window
	for i := range ls.n {
		maxLimit = max(maxLimit, ls.r[i].limit)
		minWindow = min(minWindow, ls.r[i].window*ls.r[i].stepMillis())
	}
	var hist []string
	counts := map[string]int{}
	for step := range zzSteps() {
		switch x := rng.IntN(100); {
		case x < 2:
			clock.step(rng.Int64N(1 << 40)) // years
		case x < 5:
			clock.step(rng.Int64N(10 * 24 * 3600 * 1000))
		case x < 50:
			clock.step(0)
		default:
			clock.step(rng.Int64N(max(2, minWindow*2)))
		}
		key := "k" + strconv.Itoa(rng.IntN(6))
		now := clock.millis() - base
		var op string
		var want, got, got2 Result
		var err error
		h := held[key]
		switch x := rng.IntN(100); {
		case x < 12 && len(h) > 0:
			j := rng.IntN(len(h))
			cost := h[j].cost
			if rng.IntN(3) == 0 {
				cost = 1 + rng.Int64N(maxLimit+2)
			}
			op = fmt.Sprintf("refund(%d of %d, counted %v)", cost, h[j].cost, zzCounted(h[j].v))
			v := h[j].v
			want, err = mem.refund(ctx, key, &ls, cost, &v)
			require.NoError(t, err)
			v = h[j].v
			got, err = red.refund(ctx, key, &ls, cost, &v)
			require.NoError(t, err)
			v = h[j].v
			got2, err = sto.refund(ctx, key, &ls, cost, &v)
			require.NoError(t, err)
			held[key] = slices.Delete(h, j, j+1)
		case x < 18:
			adj := penalty
			if rng.IntN(2) == 0 {
				adj = reward
			}
			cost := rng.Int64N(maxLimit + 3)
			op = fmt.Sprintf("adjust(%d, %d)", adj, cost)
			v := Result{n: ls.n, adjust: adj}
			want, err = mem.refund(ctx, key, &ls, cost, &v)
			require.NoError(t, err)
			v = Result{n: ls.n, adjust: adj}
			got, err = red.refund(ctx, key, &ls, cost, &v)
			require.NoError(t, err)
			v = Result{n: ls.n, adjust: adj}
			got2, err = sto.refund(ctx, key, &ls, cost, &v)
			require.NoError(t, err)
		default:
			cost := rng.Int64N(maxLimit + 3)
			if rng.IntN(3) == 0 {
				cost = rng.Int64N(3)
			}
			lsc := ls
			lsc.upTo = rng.IntN(5) == 0
			op = fmt.Sprintf("take(%d, upTo=%v)", cost, lsc.upTo)
			want, err = mem.take(ctx, key, &lsc, cost)
			require.NoError(t, err)
			got, err = red.take(ctx, key, &lsc, cost)
			require.NoError(t, err)
			got2, err = sto.take(ctx, key, &lsc, cost)
			require.NoError(t, err)
			c := cost
			if lsc.upTo {
				c = want.granted
			}
			if want.Allowed() && c > 0 {
				held[key] = append(held[key], zzHeld{want, c})
				counts["admitted"]++
			} else if !want.Allowed() {
				counts["rejected"]++
			}
		}
		counts[strings.SplitN(op, "(", 2)[0]]++
		hist = append(hist, fmt.Sprintf("%d: t=%d %s %s -> %s", step, now, key, op, zzShow(want)))
		if !zzEqual(want, got) || !zzEqual(want, got2) {
			var kh []string
			for _, l := range hist {
				if strings.Contains(l, " "+key+" ") {
					kh = append(kh, l)
				}
			}
			if len(kh) > 40 {
				kh = kh[len(kh)-40:]
			}
			t.Fatalf("step %d key %s %s at %d:\nmemory  %s\nredis   %s\nstorage %s\nhistory of the key:\n%s",
				step, key, op, now, zzShow(want), zzShow(got), zzShow(got2), strings.Join(kh, "\n"))
		}
	}
	t.Logf("%v", counts)
}

func zzCounted(v Result) []int64 {
	var c []int64
	for i := range v.n {
		c = append(c, v.each[i].countedIn)
	}
	return c
}

func zzEqual(a, b Result) bool {
	a.source, b.source = 0, 0
	return a == b
}

func zzShow(v Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowed=%v granted=%d [", v.Allowed(), v.granted)
	for i := range v.n {
		d := v.each[i]
		fmt.Fprintf(&b, "{rem %d reset %v retry %v counted %d} ", d.Remaining, d.ResetAfter, d.RetryAfter, d.countedIn)
	}
	b.WriteString("]")
	return b.String()
}

// RT2c: the short-value script error reached by the limiter's own values,
// no foreign writer: under two limits, a key whose first log is empty and
// whose second holds one entry is a value of 10 bytes; a deploy that turns
// on BlockFor and MinInterval (documented to keep the counts) reads it as
// a suffix of 12 bytes after -2 bytes of logs, and every call on the key
// fails with a script error until the value expires (here: an hour).
func TestZZLogDeployBlockAndGapOnTwoLimits(t *testing.T) {
	client := redistest.Start(t).Client(t)
	now := newSettableNow()
	var errs []error
	cfg := Config{
		Algorithm: SlidingLog, Limits: []Limit{{Max: 5, Expiration: time.Second}, {Max: 100, Expiration: time.Hour}},
		Redis: client, Now: now.Now, Name: "deploy", DisableDenyCache: true,
		OnStorageError: func(err error) { errs = append(errs, err) },
	}
	l1, err := New(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l1.Take(ctx, "k", 1)
	require.NoError(t, err)
	now.Add(1500 * time.Millisecond)
	b, err := l1.Take(ctx, "k", 1)
	require.NoError(t, err)
	now.Add(100 * time.Millisecond)
	_, err = l1.Refund(ctx, "k", 1, &b)
	require.NoError(t, err)
	keys, _ := client.Keys(ctx, "*deploy*").Result()
	for _, k := range keys {
		v, _ := client.Get(ctx, k).Result()
		t.Logf("%s = %x (%d bytes)", k, v, len(v))
	}

	cfg.BlockFor, cfg.MinInterval = time.Minute, 100*time.Millisecond
	l2, err := New(cfg)
	require.NoError(t, err)
	for range 3 {
		now.Add(time.Second)
		for _, k := range keys {
			v, _ := client.Get(ctx, k).Result()
			t.Logf("before: %s = %x (%d bytes)", k, v, len(v))
		}
		res, err := l2.Take(ctx, "k", 1)
		require.NoError(t, err)
		t.Logf("source %v allowed %v %s", res.Source(), res.Allowed(), zzShow(res))
		require.Equal(t, SourceBackend, res.Source(), "errors: %v", errs)
	}
}

// RT1b: the generic Storage's twin of the unsorted foreign log: a value of
// the log's layout whose entries are out of time order (the newest, last,
// in the past) keeps the key full for as long as the far entries say.
func TestZZStorageUnsortedLogLocksOut(t *testing.T) {
	now := newSettableNow()
	st := &mapStorage{m: map[string][]byte{}}
	l, err := New(Config{Algorithm: SlidingLog, Limits: []Limit{{Max: 3, Expiration: time.Second}}, Storage: st, Now: now.Now, Name: "unsorted", DisableDenyCache: true})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.Take(ctx, "k", 1)
	require.NoError(t, err)
	var key string
	for k := range st.m {
		key = k
	}
	t0 := now.ms.Load()
	far := t0 + 10*365*24*3600*1000
	var sts [maxStates]state
	sts[0] = state{a: t0 - 5000, b: 3}
	ls := one(rule{limit: 3, burst: 3, window: 1000})
	lg := newLogs(&ls)
	lg.ring[0][0], lg.ring[0][1], lg.ring[0][2] = far, far, t0-5000
	val := encodeLogs(encodeStates(&sts, 1, far), &sts, lg, &ls)
	st.m[key] = val
	for _, d := range []time.Duration{0, time.Hour, 24 * time.Hour} {
		now.Set(time.UnixMilli(t0).Add(d))
		res, err := l.Take(ctx, "k", 1)
		require.NoError(t, err)
		t.Logf("at +%v: %s", d, zzShow(res))
		require.True(t, res.Allowed(), "at +%v: held off by a foreign value for %v", d, res.RetryAfter())
	}
}

// zzModel is one key of the log kept apart from any manager: its own
// states and rings, decided by the same step functions.
type zzModel struct {
	sts [maxStates]state
	lg  logs
}

func newZZModel(ls *limits) *zzModel {
	m := &zzModel{}
	for i := range ls.n {
		m.lg.ring[i] = make([]int64, ls.r[i].limit)
	}
	return m
}

func (m *zzModel) take(now int64, ls *limits, cost int64) Result {
	var v Result
	switch {
	case ls.keyRules():
		SlidingLog.decideKeyInto(&v, &m.sts, &m.lg, now, ls, cost)
		if ls.upTo {
			cost = v.granted
		}
	case ls.upTo:
		SlidingLog.decideUpToInto(&v, &m.sts, &m.lg, now, ls, cost)
		cost = v.granted
	default:
		SlidingLog.decideInto(&v, &m.sts, &m.lg, now, ls, cost)
	}
	if v.Allowed() && cost > 0 {
		m.lg.record(&m.sts, ls, cost)
	}
	return v
}

func (m *zzModel) refund(now int64, ls *limits, cost int64, v *Result) Result {
	return SlidingLog.refundAll(&m.sts, &m.lg, now, ls, cost, v)
}

// RT: the in-memory manager at a small MaxKeys (one key per shard, and a
// few), many keys, so that inserts replace victims, sweeps compact, and
// shards grow: every decision on a key equals that of a model kept apart,
// reset whenever the manager no longer holds the key (evicted). A victim's
// entries leaking into the key that takes its slot, or a compaction that
// moves a log wrongly, shows as a difference.
func TestZZManagerEvictionMatchesModel(t *testing.T) {
	for _, maxKeys := range []int{1, 256, 700, 3000} {
		for seed := range 3 {
			t.Run(fmt.Sprintf("maxKeys%d/seed%d", maxKeys, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(maxKeys)))
				ls := limits{n: 1 + rng.IntN(3)}
				for i := range ls.n {
					limit := int64(1 + rng.IntN(12))
					ls.r[i] = rule{limit: limit, burst: limit, window: int64(50 + rng.IntN(3000))}
				}
				if seed == 1 {
					ls.block = 100
				}
				if seed == 2 {
					ls.gap = 3
				}
				var clock testClock
				clock.now.Store(1_000_000)
				m := testManager(SlidingLog, ls, maxKeys, clock.millis)
				models := map[string]*zzModel{}
				held := map[string][]zzHeld{}
				ctx := context.Background()
				nkeys := 2000
				evicted := 0
				for step := range 60000 {
					clock.now.Add(rng.Int64N(3))
					k := rng.IntN(nkeys)
					key := "key" + strconv.Itoa(k)
					if k%7 == 0 {
						key = strings.Repeat("long", 20) + key // kept as a digest
					}
					now := clock.millis()
					// Is the key still in the manager?
					var buf [32]byte
					sk, klen := storedKey(key, &buf)
					s, h := m.shardFor(sk)
					s.mu.Lock()
					i := s.find(sk, klen, uint32(h))
					live := i >= 0 && s.entries[i].exp > now
					s.mu.Unlock()
					md := models[key]
					if md != nil && !live {
						if md.sts != ([maxStates]state{}) {
							evicted++
						}
						md = nil
						delete(held, key)
					}
					if md == nil {
						md = newZZModel(&ls)
						models[key] = md
					}
					var want, got Result
					var op string
					h2 := held[key]
					switch x := rng.IntN(20); {
					case x == 0 && len(h2) > 0:
						j := rng.IntN(len(h2))
						op = "refund"
						v := h2[j].v
						want = md.refund(now, &ls, h2[j].cost, &v)
						v = h2[j].v
						got, _ = m.refund(ctx, key, &ls, h2[j].cost, &v)
						held[key] = slices.Delete(h2, j, j+1)
					case x == 1 || x == 2:
						adj := penalty
						if x == 2 {
							adj = reward
						}
						op = fmt.Sprintf("adjust %d", adj)
						cost := rng.Int64N(5)
						v := Result{n: ls.n, adjust: adj}
						want = md.refund(now, &ls, cost, &v)
						v = Result{n: ls.n, adjust: adj}
						got, _ = m.refund(ctx, key, &ls, cost, &v)
					default:
						cost := rng.Int64N(5)
						lsc := ls
						lsc.upTo = rng.IntN(4) == 0
						op = fmt.Sprintf("take %d upTo %v", cost, lsc.upTo)
						want = md.take(now, &lsc, cost)
						got, _ = m.take(ctx, key, &lsc, cost)
						c := cost
						if lsc.upTo {
							c = want.granted
						}
						if want.Allowed() && c > 0 {
							held[key] = append(held[key], zzHeld{want, c})
						}
					}
					if !zzEqual(want, got) {
						t.Fatalf("step %d key %s %s at %d: model %s, manager %s", step, key, op, now, zzShow(want), zzShow(got))
					}
				}
				t.Logf("%d keys held, %d live keys dropped by the manager", m.len(), evicted)
			})
		}
	}
}

// RT: three Limiters (each its own client) on one Redis, the server's
// clock, many goroutines on a few hot keys, takes and up-to takes of
// random costs: for every limit, the units admitted (at the times Redis
// counted them) never exceed Max in any window.
func TestZZLogReplicasExact(t *testing.T) {
	server := redistest.Start(t)
	limitsCfg := []Limit{{Max: 5, Expiration: 50 * time.Millisecond}, {Max: 50, Expiration: 700 * time.Millisecond}, {Max: 300, Expiration: 3 * time.Second}}
	var ls []*Limiter
	for range 3 {
		l, err := New(Config{Algorithm: SlidingLog, Limits: limitsCfg, Redis: server.Client(t), Name: "replicas", FailurePolicy: FailClosed, StorageTimeout: time.Second})
		require.NoError(t, err)
		ls = append(ls, l)
	}
	type ev struct {
		at   [maxLimits]int64
		cost int64
	}
	var mu sync.Mutex
	events := map[string][]ev{}
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	var calls, errs, failed atomic.Int64
	for g := range 18 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			l := ls[g%3]
			ctx := context.Background()
			for time.Now().Before(stop) {
				key := "hot" + strconv.Itoa(rng.IntN(3))
				cost := rng.IntN(4)
				var res Result
				var err error
				granted := cost
				if rng.IntN(4) == 0 {
					granted, res, err = l.TakeUpTo(ctx, key, cost)
				} else {
					res, err = l.Take(ctx, key, cost)
				}
				calls.Add(1)
				if err != nil {
					errs.Add(1)
					continue
				}
				if res.Source() != SourceBackend && res.Source() != SourceDenyCache {
					failed.Add(1)
					continue
				}
				if res.Allowed() && granted > 0 && res.Source() == SourceBackend {
					e := ev{cost: int64(granted)}
					for i := range len(limitsCfg) {
						e.at[i] = res.each[i].countedIn
					}
					mu.Lock()
					events[key] = append(events[key], e)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls, %d errors, %d not from Redis", calls.Load(), errs.Load(), failed.Load())
	require.Zero(t, failed.Load())
	for key, evs := range events {
		for i, lim := range limitsCfg {
			w := lim.Expiration.Milliseconds()
			sorted := slices.Clone(evs)
			slices.SortFunc(sorted, func(a, b ev) int { return int(a.at[i] - b.at[i]) })
			sum, lo := int64(0), 0
			most := int64(0)
			for _, e := range sorted {
				sum += e.cost
				for sorted[lo].at[i] <= e.at[i]-w {
					sum -= sorted[lo].cost
					lo++
				}
				most = max(most, sum)
				require.LessOrEqual(t, sum, int64(lim.Max), "key %s limit %d: %d units in the window ending %d", key, i, sum, e.at[i])
			}
			t.Logf("key %s limit %d/%v: %d admitted takes, at most %d units in a window", key, lim.Max, lim.Expiration, len(evs), most)
		}
	}
}
