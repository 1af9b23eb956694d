package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// heapChildEnv, when set in the environment, makes the program (or the test
// binary) measure one variant's heap per key and print it instead of
// running: "<variant>|<keys>". Each measurement runs in a fresh process so
// that what earlier variants left behind (Fiber's memory store keeps a
// goroutine, and so its map, alive for good) neither enters the figure nor
// slows the rest of the run.
const heapChildEnv = "LIMITERBENCH_HEAP_CHILD"

// heapVariants are the variants of figure 2, by memVariants name.
var heapVariants = []string{vOursFixed, vOursSliding, vOursToken, vFiberFixed, vFiberSliding, vUluleMem}

// heapResult holds figure 2: per variant, the live heap per key beyond the
// key's bytes, one sample per round.
type heapResult struct {
	keys   int
	perKey map[string][]float64
}

// liveHeap is the heap in use after two garbage collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapPerKey tracks n distinct keys, one admitted request each (limit 10
// per minute, so none expires meanwhile), in a fresh limiter of variant,
// and returns the growth of the live heap divided by n, less the keys' own
// bytes (13 each). Ours and Fiber's are measured through a Fiber app;
// ulule's memory store through its limiter, whose stored key also carries
// the "ulule:" prefix.
func heapPerKey(variant string, n int) (float64, error) {
	keys := make([][]byte, n)
	keyBytes := 0
	for i := range keys {
		keys[i] = []byte("key-" + strconv.Itoa(100_000_000+i))
		keyBytes += len(keys[i])
	}
	var take func(k []byte) error
	if variant == vUluleMem {
		lim := ululeMemoryLimiter(10)
		defer runtime.KeepAlive(lim)
		take = func(k []byte) error {
			res, err := lim.Get(context.Background(), string(k))
			if err == nil && res.Reached {
				err = errors.New("rejected")
			}
			return err
		}
	} else {
		var h fasthttp.RequestHandler
		for _, v := range memVariants() {
			if v.name == variant && (v.mw != nil || v.app != nil) {
				h = v.handler(10)
			}
		}
		if h == nil {
			return 0, fmt.Errorf("unknown heap variant %q", variant)
		}
		defer runtime.KeepAlive(h)
		req := newRequest()
		take = func(k []byte) error {
			if code := req.serve(h, k); code != fiber.StatusOK {
				return fmt.Errorf("status %d", code)
			}
			return nil
		}
	}
	if err := take([]byte("warm-up")); err != nil { // lazy set-up out of the figure
		return 0, err
	}
	before := liveHeap()
	for _, k := range keys {
		if err := take(k); err != nil {
			return 0, fmt.Errorf("key %s: %w", k, err)
		}
	}
	after := liveHeap()
	runtime.KeepAlive(keys)
	return (float64(after) - float64(before) - float64(keyBytes)) / float64(n), nil
}

// runHeapChild is the child process's work for spec (see heapChildEnv): it
// prints the heap per key on w and returns the exit code.
func runHeapChild(spec string, w io.Writer) int {
	variant, n, ok := strings.Cut(spec, "|")
	keys, err := strconv.Atoi(n)
	if !ok || err != nil || keys <= 0 {
		fmt.Fprintf(os.Stderr, "bad %s=%q\n", heapChildEnv, spec)
		return 2
	}
	perKey, err := heapPerKey(variant, keys)
	if err != nil {
		fmt.Fprintf(os.Stderr, "heap %s: %v\n", variant, err)
		return 1
	}
	if _, err := fmt.Fprintf(w, "%.3f\n", perKey); err != nil {
		fmt.Fprintf(os.Stderr, "heap %s: %v\n", variant, err)
		return 1
	}
	return 0
}

// heapInChild runs heapPerKey(variant, n) in a fresh copy of this
// executable.
func heapInChild(variant string, n int) (float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), heapChildEnv+"="+variant+"|"+strconv.Itoa(n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dieWithParent(cmd)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("heap child %s: %v: %s", variant, err, stderr.Bytes())
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

// runHeap measures figure 2, every variant in turn in each round.
func runHeap(o options) (*heapResult, error) {
	res := &heapResult{keys: o.heapKeys, perKey: map[string][]float64{}}
	for round := range o.rounds {
		progressf(o, "2. heap per key: round %d/%d", round+1, o.rounds)
		for _, vi := range rotate(len(heapVariants), round) {
			v := heapVariants[vi]
			b, err := heapInChild(v, o.heapKeys)
			if err != nil {
				return nil, err
			}
			res.perKey[v] = append(res.perKey[v], b)
		}
	}
	return res, nil
}

// tables renders figure 2.
func (r *heapResult) tables() []*table {
	t := &table{
		title:  fmt.Sprintf("2. Heap per key in memory (%s distinct keys tracked, one request each)", count(r.keys)),
		header: []string{"variant", "B/key", "ours-fixed / this"},
		notes: []string{
			"B/key: growth of the live heap (runtime.GC, MemStats.HeapAlloc) over the keys, less the 13 key bytes, per key; median over rounds, each in a fresh process.",
			"What a limiter allocates when it is created is before the measurement and not counted; ulule's stored key carries a \"ulule:\" prefix (6 more bytes).",
		},
	}
	for _, v := range heapVariants {
		ratio := "-"
		if !strings.HasPrefix(v, "ours-") {
			ratio = fmtRatio(pairedRatio(r.perKey[vOursFixed], r.perKey[v]))
		}
		t.add(v, fmt.Sprintf("%.1f", median(r.perKey[v])), ratio)
	}
	return []*table{t}
}
