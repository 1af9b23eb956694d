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

// TestWaitingFigure runs figure 8 alone at tiny sizes and checks what
// holds whatever the machine's speed: under MaxDelay at 3x the limit,
// requests wait for their turn (some for most of MaxDelay), the others
// get 429, and waiting admits no more than the limit; a Concurrency
// request on Redis is exactly one script call and one ZREM.
func TestWaitingFigure(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("LIMITER_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server not found and LIMITER_REQUIRE_REDIS=1: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	o := tinyOptions(t)
	o.figures = map[int]bool{8: true}
	o.waitRate, o.waitWindow, o.waitTime = 50, 200*time.Millisecond, 800*time.Millisecond
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

	// 8a. The measured span holds o.waitTime/o.waitWindow windows; one
	// more window's worth covers its phase against the windows and the
	// token bucket's Burst. Without MaxDelay no one waits.
	windows := int(o.waitTime / o.waitWindow)
	for _, v := range r.waiting.variants {
		samples := r.waiting.samples[v]
		if len(samples) != o.waitRounds {
			t.Fatalf("waiting: %s: %d samples, want %d", v, len(samples), o.waitRounds)
		}
		for _, s := range samples {
			if s.failed != 0 {
				t.Errorf("waiting: %s: %d failed (%v)", v, s.failed, s.firstErr)
			}
			if s.admitted == 0 || s.rejected == 0 || s.rejected >= s.sent {
				t.Errorf("waiting: %s: %d admitted, %d of %d sent rejected; want some of each at %dx the limit", v, s.admitted, s.rejected, s.sent, waitLoad)
			}
			if most := (windows + 1) * o.waitRate; s.admitted > most {
				t.Errorf("waiting: %s: %d admitted in %v, over %d (%d per %v)", v, s.admitted, o.waitTime, most, o.waitRate, o.waitWindow)
			}
			if len(s.waits) > 0 {
				if longest := time.Duration(s.waits[len(s.waits)-1]); longest < o.waitWindow/2 {
					t.Errorf("waiting: %s: the longest wait is %v; at %dx the limit, turns reach MaxDelay (%v) ahead", v, longest, waitLoad, o.waitWindow)
				}
			}
		}
	}

	// 8b. Every variant was measured.
	for _, v := range r.slots.memVariants {
		for ci := range r.slots.memCells {
			if ns := median(r.slots.ns[cellVariant{ci, v}]); !(ns > 0) {
				t.Errorf("slots, memory: %s: %v ns/op", v, ns)
			}
		}
	}

	// 8c. A Concurrency request is one script call to acquire its slot and
	// one ZREM to give it back, counted exactly; nothing failed.
	for _, v := range r.slots.variants {
		for ci, c := range r.slots.cells {
			k := cellVariant{ci, v}
			if n := r.slots.errors[k]; n != 0 {
				t.Errorf("slots, redis: %s, %s: %d failed (%v)", v, c.name(r.slots.keys), n, r.slots.firstErr[v])
			}
			if v != rMwOursSlots && v != rEngineSlots {
				continue
			}
			for _, u := range r.slots.use[k] {
				if math.Abs(u.scripts-1) > 1e-9 || math.Abs(u.zrems-1) > 1e-9 || !(u.usec > 0) {
					t.Errorf("slots, redis: %s, %s: %v script calls, %v ZREM and %v µs a request; want 1, 1 and some", v, c.name(r.slots.keys), u.scripts, u.zrems, u.usec)
				}
			}
		}
	}
	if r.slots.ceilingSkip == "" && !(median(r.slots.ceilingUsec) > 0) {
		t.Errorf("slots: the ceiling script's µs per call is %v", r.slots.ceilingUsec)
	}

	for _, want := range []string{"## 8a.", "## 8b.", "## 8c.", "ours-log, redis ×3", "ours-token, memory", rMwOursSlots, rEngineSlots, vOursSlots + " / " + vOursFixed} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "## 1.") {
		t.Error("-only 8 ran figure 1")
	}
}

// TestOnlyEight checks that -only takes figure 8 and no figure past it.
func TestOnlyEight(t *testing.T) {
	o, err := parseFlags([]string{"-only", "8"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if !o.runs(8) || o.runs(7) {
		t.Errorf("-only 8: runs(8) = %v, runs(7) = %v", o.runs(8), o.runs(7))
	}
	for _, bad := range []string{"9", "0", "4"} {
		if _, err := parseFlags([]string{"-only", bad}, new(bytes.Buffer)); err == nil {
			t.Errorf("-only %s was accepted", bad)
		}
	}
}
