package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the heap figure's child process,
// as the program does (see heapChildEnv).
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(heapChildEnv); ok {
		os.Exit(runHeapChild(spec, os.Stdout))
	}
	os.Exit(m.Run())
}

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// tinyOptions is the quick preset shrunk to what a test can afford under
// the race detector.
func tinyOptions(t *testing.T) options {
	o := quickOptions()
	o.command = "go test (tiny sizes)"
	o.overheadTime = 5 * time.Millisecond
	o.overheadKeys = 1000
	o.heapKeys = 2000
	o.redisTime = 20 * time.Millisecond
	o.redisKeys = 1000
	o.ceilingRequests = 2000
	o.storageTimeout = 10 * time.Second // the race detector slows every call
	o.progress = logWriter{t}
	return o
}

// TestQuickRun runs every figure with tiny sizes and checks what must hold
// whatever the machine's speed.
func TestQuickRun(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("LIMITER_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server not found and LIMITER_REQUIRE_REDIS=1: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	o := tinyOptions(t)
	r, err := runAll(o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.write(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log("\n" + out)

	// Figure 5: ours, redis_rate and ulule are exact across replicas; Fiber's
	// limiter on Redis admits at least the limit.
	for _, v := range r.replicas.variants {
		if n := r.replicas.failed[v]; n != 0 {
			t.Errorf("replicas: %s: %d failed decisions (%v)", v, n, r.replicas.firstErr[v])
		}
		for _, a := range r.replicas.admitted[v] {
			exact := strings.HasPrefix(v, "ours-") || v == rRedisRate || v == rUlule
			if exact && a != float64(o.replicaLimit) || !exact && a < float64(o.replicaLimit) {
				t.Errorf("replicas: %s admitted %.0f, limit %d", v, a, o.replicaLimit)
			}
		}
	}

	// Figures 3 and 4: every variant decided, without errors, in every column.
	for _, v := range r.throughput.variants {
		if n := r.throughput.errors[v.name]; n != 0 {
			t.Errorf("throughput: %s: %d failed decisions (%v)", v.name, n, r.throughput.firstErr[v.name])
		}
		for ci, c := range r.throughput.cells {
			k := cellVariant{ci, v.name}
			if rate, p99 := median(r.throughput.rate[k]), median(r.throughput.p99[k]); !(rate > 0) || !(p99 > 0) {
				t.Errorf("throughput: %s, %s: rate %v, p99 %v", v.name, c.name(r.throughput.keys), rate, p99)
			}
		}
	}

	// Figure 1: every variant was measured; ours allocates nothing per
	// request (the race detector's sync.Pool drops items, so not under it).
	for _, v := range r.overhead.variants {
		for ci := range r.overhead.cells {
			if ns := median(r.overhead.ns[cellVariant{ci, v}]); !(ns > 0) {
				t.Errorf("overhead: %s: %v ns/op", v, ns)
			}
		}
		if strings.HasPrefix(v, "ours-") && !raceEnabled {
			if a := r.overhead.maxAllocs(v); a > 0.05 {
				t.Errorf("overhead: %s: %.2f allocs/op, want 0", v, a)
			}
		}
	}

	// Figure 2: every variant holds something per key.
	for _, v := range heapVariants {
		if b := median(r.heap.perKey[v]); !(b > 0) {
			t.Errorf("heap: %s: %v B/key", v, b)
		}
	}

	// Figure 6, when redis-benchmark is there.
	if r.ceiling.skipped == "" {
		if !(median(r.ceiling.plain) > 0) || !(median(r.ceiling.pipelined) > 0) {
			t.Errorf("ceiling: redis-benchmark gave %v and %v", r.ceiling.plain, r.ceiling.pipelined)
		}
		if !(median(r.ceiling.rate[rOursFixed]) > 0) {
			t.Errorf("ceiling: ours gave %v", r.ceiling.rate[rOursFixed])
		}
		if !(median(r.ceiling.scriptUsec) > 0) {
			t.Errorf("ceiling: the script's µs per call in redis-benchmark's run is %v", r.ceiling.scriptUsec)
		}
		// A lease decides the hot key from shares: a few grants for the
		// whole measurement, where the same call without a lease makes a
		// script call per batch of decisions. (The token bucket leases
		// only while the bucket is in debt, never under 10^9 per minute.)
		for _, p := range leasePairs[:2] {
			lease, exact := median(r.ceiling.hotCalls[p[0]]), median(r.ceiling.hotCalls[p[1]])
			if !(exact > 0) || !(lease < exact/4) {
				t.Errorf("ceiling: hot key, script calls per decision: %s %v, %s %v; want the lease's under a quarter", p[0], lease, p[1], exact)
			}
		}
	}

	// Figure 7: every cell played its trace, and the estimate erred
	// somewhere (it is an estimate).
	wrong := 0
	for _, m := range estimateMaxes {
		for _, load := range estimateLoads {
			c := r.estimate.cells[m][load]
			if c.requests == 0 || c.admitted == 0 || c.logAdmitted == 0 {
				t.Errorf("estimate: Max %d at %.1fx: %+v", m, load, c)
			}
			if c.logOver != 0 {
				t.Errorf("estimate: Max %d at %.1fx: the log left more than Max in a window %d times", m, load, c.logOver)
			}
			wrong += c.wrongAdmit + c.wrongReject
		}
	}
	if wrong == 0 {
		t.Error("estimate: the sliding window never decided otherwise than the log")
	}

	// The table names every figure and every peer.
	for _, want := range []string{
		"## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7.", "command: go test", "GOMAXPROCS=",
		vFiberFixed, vFiberSliding, vUluleMem, rRedisRate, rUlule, rMwFiber, "fiber-fixed-redis",
		rOursFixed, rOursFixedUnpiped, rMwOursFixed, "ours-fixed / redis_rate", vFloor + " / " + vFiberFixed,
		rOursFixedLease, rOursSlidingLease, rOursTokenLease, "## 6b.", "## 6c.", rOursFixedLease + " / " + rEngineFixed,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// TestStats checks the helpers the figures rest on.
func TestStats(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median odd = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median even = %v", m)
	}
	if m := median(nil); !math.IsNaN(m) {
		t.Errorf("median empty = %v", m)
	}
	if r := pairedRatio([]float64{2, 9, 3}, []float64{1, 0, 3}); r != 1.5 {
		t.Errorf("pairedRatio = %v, want 1.5 (the round with 0 left out)", r)
	}
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := quantile(sorted, 0.5); q != 5 {
		t.Errorf("p50 = %v", q)
	}
	if q := quantile(sorted, 0.99); q != 10 {
		t.Errorf("p99 = %v", q)
	}
	if got := rotate(3, 4); got[0] != 1 || got[1] != 2 || got[2] != 0 {
		t.Errorf("rotate(3, 4) = %v", got)
	}
	for n, want := range map[int]string{100_000: "100k", 1_000_000: "1M", 1234: "1234"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestParseFlags checks the presets and that explicit flags win.
func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick", "-rounds", "3", "-redis-server", "/x/redis-server"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	q := quickOptions()
	if o.rounds != 3 || o.redisTime != q.redisTime || o.heapKeys != q.heapKeys || o.redisServer != "/x/redis-server" {
		t.Errorf("parsed %+v", o)
	}
	if o.command != "cd bench && go run . -quick -rounds 3 -redis-server /x/redis-server" {
		t.Errorf("command %q", o.command)
	}
	if _, err := parseFlags([]string{"extra"}, new(bytes.Buffer)); err == nil {
		t.Error("a stray argument was accepted")
	}

	o, err = parseFlags([]string{"-only", "3,6", "-callers", "1, 64"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.callers) != 2 || o.callers[0] != 1 || o.callers[1] != 64 {
		t.Errorf("-callers gave %v, want [1 64]", o.callers)
	}
	for n, want := range map[int]bool{1: false, 2: false, 3: true, 5: false, 6: true} {
		if o.runs(n) != want {
			t.Errorf("-only 3,6: runs(%d) = %v, want %v", n, o.runs(n), want)
		}
	}
	if !defaultOptions().runs(2) {
		t.Error("without -only, figure 2 is not run")
	}
	for _, bad := range [][]string{{"-only", "4"}, {"-only", "x"}, {"-callers", "0"}, {"-callers", "8,"}} {
		if _, err := parseFlags(bad, new(bytes.Buffer)); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// TestTable checks the fixed-width layout.
func TestTable(t *testing.T) {
	tb := &table{title: "T", header: []string{"a", "bb"}, notes: []string{"n"}}
	tb.add("xyz", "1")
	var buf bytes.Buffer
	if err := tb.write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "\n## T\n\n| a   | bb |\n|:----|---:|\n| xyz |  1 |\n  n\n"
	if buf.String() != want {
		t.Errorf("table:\n%q\nwant\n%q", buf.String(), want)
	}
}
