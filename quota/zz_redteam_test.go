package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
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
