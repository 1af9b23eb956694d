package limiter

import (
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

// updateSVG makes TestAlgorithmsSVG rewrite docs/algorithms.svg instead of
// comparing it with what the code draws now.
var updateSVG = flag.Bool("update-svg", false, "rewrite docs/algorithms.svg (TestAlgorithmsSVG)")

const (
	// svgPath is the picture of the three algorithms, relative to the
	// package directory the test runs in.
	svgPath = "docs/algorithms.svg"
	// svgRegenerate is the command that rewrites svgPath.
	svgRegenerate = "go test -run '^TestAlgorithmsSVG$' . -update-svg"

	// The rule every lane is drawn under: svgMax requests per svgWindow ms
	// (so the token bucket refills one token a second and holds svgMax).
	svgMax    = 10
	svgWindow = 10_000
)

// svgPhase is one stretch of the simulated traffic: the times (ms on the
// simulated clock) of its requests, and the label it gets in the picture.
type svgPhase struct {
	label string
	times []int64
}

// svgEvery returns n times, step ms apart, from the first.
func svgEvery(first, step int64, n int) []int64 {
	times := make([]int64, n)
	for i := range times {
		times[i] = first + int64(i)*step
	}
	return times
}

// svgTraffic is the traffic every algorithm gets: 103 requests from one
// client over 60 s, in four phases.
func svgTraffic() []svgPhase {
	return []svgPhase{
		// A rested client opens with 25 requests in under a second.
		{"25 in 1 s", svgEvery(0, 40, 25)},
		// Then one a second, the rule's own rate, from 2 s to 11 s.
		{"1 req/s", svgEvery(2_000, 1_000, 10)},
		// After a pause, 20 requests in one second, 19.50 s to 20.45 s,
		// across the edge of the 10 s windows at 20 s.
		{"20 in 1 s across a window edge", svgEvery(19_500, 50, 20)},
		// After a longer pause, twice the rule's rate for 24 s: two a second
		// from 36 s to 59.5 s.
		{"2 req/s for 24 s", svgEvery(36_000, 500, 48)},
	}
}

// svgRequest is one request of the traffic and what the limiter answered.
type svgRequest struct {
	at       int64 // ms on the simulated clock
	phase    int   // index into svgTraffic
	admitted bool  // 200; else 429
}

// svgLane is one algorithm's row of the picture.
type svgLane struct {
	name string
	reqs []svgRequest
	// starts are drawn as dashed lines across the lane: the fixed window's
	// window starts, none for the others.
	starts []int64
}

// svgRun sends the traffic through the real middleware with algorithm mw,
// on a fiber app served by app.Handler() on fasthttp.RequestCtx values, with
// the limiter's clock set to each request's time, and returns every
// request's outcome.
func svgRun(t *testing.T, mw LimiterHandler, phases []svgPhase) []svgRequest {
	t.Helper()
	var now int64
	clockReads := 0
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(New(Config{
		Max:               svgMax,
		Expiration:        svgWindow * time.Millisecond,
		LimiterMiddleware: mw,
		clock: func() int64 {
			clockReads++
			return now
		},
	}))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	handler := app.Handler()
	client := &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 40000}

	var reqs []svgRequest
	for p, phase := range phases {
		for _, at := range phase.times {
			require.GreaterOrEqual(t, at, now, "the traffic must be in time order")
			now = at
			var req fasthttp.Request
			req.Header.SetMethod(fasthttp.MethodGet)
			req.SetRequestURI("/")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, client, nil)
			handler(&ctx)
			status := ctx.Response.StatusCode()
			require.Contains(t, []int{fiber.StatusOK, fiber.StatusTooManyRequests}, status, "request at %d ms", at)
			reqs = append(reqs, svgRequest{at: at, phase: p, admitted: status == fiber.StatusOK})
		}
	}
	// The in-memory manager reads the injected clock instead of the
	// request's own time: once per decision, so the simulated time is what
	// decided every request.
	require.Equal(t, len(reqs), clockReads, "clock reads")
	return reqs
}

// svgAdmitted counts the admitted requests of reqs in phase (-1: all).
func svgAdmitted(reqs []svgRequest, phase int) int {
	n := 0
	for _, r := range reqs {
		if r.admitted && (phase < 0 || r.phase == phase) {
			n++
		}
	}
	return n
}

// svgAdmittedIn counts the admitted requests in [from, to).
func svgAdmittedIn(reqs []svgRequest, from, to int64) int64 {
	var n int64
	for _, r := range reqs {
		if r.admitted && r.at >= from && r.at < to {
			n++
		}
	}
	return n
}

// svgMostIn is the most requests admitted in any span of d ms: in
// [t, t+d) for t the time of an admitted request, where such a maximum
// always starts.
func svgMostIn(reqs []svgRequest, d int64) int64 {
	var most int64
	for _, r := range reqs {
		if r.admitted {
			most = max(most, svgAdmittedIn(reqs, r.at, r.at+d))
		}
	}
	return most
}

// svgFixedStarts are the fixed window's windows as its doc states them: the
// first admitted request starts one, and so does the first admitted
// request after a window has ended.
func svgFixedStarts(reqs []svgRequest, window int64) []int64 {
	var starts []int64
	end := int64(math.MinInt64)
	for _, r := range reqs {
		if r.admitted && r.at >= end {
			starts = append(starts, r.at)
			end = r.at + window
		}
	}
	return starts
}

// TestAlgorithmsSVG drives FixedWindow, SlidingWindow, TokenBucket and SlidingLog with
// the same traffic under the rule of 10 requests per 10 s, checks what each
// admits against counts worked out by hand and against what each promises,
// and draws the outcome into docs/algorithms.svg: the test fails when that
// file differs from the drawing, and -update-svg rewrites it.
func TestAlgorithmsSVG(t *testing.T) {
	phases := svgTraffic()
	fixed := svgRun(t, FixedWindow{}, phases)
	sliding := svgRun(t, SlidingWindow{}, phases)
	bucket := svgRun(t, TokenBucket{}, phases)
	log := svgRun(t, SlidingLog{}, phases)
	total := len(fixed)
	require.Equal(t, 103, total)

	// Admitted per phase, worked out by hand from the step functions.
	//
	// Phase 0, 25 requests at 0, 40, ..., 960 ms: each algorithm admits the
	// first 10 (to 360 ms) and nothing more. The bucket refills 0.04
	// tokens between requests and would have its next token at 1000 ms.
	//
	// Phase 1, one request a second at 2, 3, ..., 11 s:
	//   - fixed: the window [0 s, 10 s) is full; 10 s starts [10 s, 20 s),
	//     so 10 s and 11 s pass: 2.
	//   - sliding: to 9 s the window [0 s, 10 s) is full; at 10 s its 10
	//     weigh 10 in full as the previous window; at 11 s they weigh
	//     10*0.9 = 9, and 9+1 <= 10: only 11 s passes: 1.
	//   - bucket: it holds 2 tokens at 2 s (0.36 at 360 ms, plus 1.64
	//     refilled) and refills one a second: all 10 pass, leaving 1 token
	//     at 11 s.
	//
	// Phase 2, 20 requests at 19.50, 19.55, ..., 20.45 s:
	//   - fixed: 2 of [10 s, 20 s) used, so 8 pass until 19.85 s; 20 s
	//     starts [20 s, 30 s) and 10 more pass until 20.45 s: 18 in one
	//     second, nearly twice the limit.
	//   - sliding: at 19.50+0.05k s the estimate is
	//     10*(0.5-0.05k)/10 + 2 + k <= 10, true for k <= 7: 8 pass; at 20 s
	//     the previous window's 9 weigh 9 in full, so 9+1 passes and then
	//     nothing: 9.
	//   - bucket: 1 + 8.5 = 9.5 tokens at 19.50 s, plus 0.05 a request:
	//     9 pass to 19.90 s, the next token is there at 20.00 s: 10.
	//
	// Phase 3, two requests a second at 36.0, 36.5, ..., 59.5 s:
	//   - fixed: windows start at 36 s, 46 s and 56 s; each admits its
	//     first 10 requests (the last only has 8): 10+10+8 = 28.
	//   - sliding: in [30 s, 40 s) the previous window's 1 weighs at most
	//     0.4, so all 8 pass; in [40 s, 50 s) those 8 weigh 8*(1-e/10 s)
	//     and 9 pass, at 40.0, 40.5, 41.5, 42.5, 44.0, 45.0, 46.5, 47.5
	//     and 49.0 s; in [50 s, 60 s) the 9 weigh 9*(1-e/10 s) and 9 pass,
	//     at 50.0, 51.5, 52.5, 53.5, 54.5, 56.0, 57.0, 58.0 and 59.0 s:
	//     8+9+9 = 26.
	//   - bucket: full again since 30 s; each second two requests want 2
	//     tokens and 1 refills, so 19 pass to 45.0 s, then
	//     every other one, at 46, 47, ..., 59 s: 19+14 = 33.
	//
	// The log, phase by phase: 10 of the burst; at 10 s the entry of 0 s
	// has left (a window is (t-10 s, t]) and at 11 s all the burst's, so
	// 10 s and 11 s pass: 2; at 19.50 s it holds 10 s and 11 s, so 8 pass
	// to 19.85 s, and 20.00 s once 10 s has left: 9; from 36 s it admits
	// 10 (to 40.5 s), then each entry leaves 10 s after it came: 46.0 to
	// 50.5 s pass, 51.0 to 55.5 s find it full again, 56.0 to 59.5 s pass:
	// 10+10+8 = 28.
	want := map[string][4]int{
		"fixed":   {10, 2, 18, 28},
		"sliding": {10, 1, 9, 26},
		"bucket":  {10, 10, 10, 33},
		"log":     {10, 2, 9, 28},
	}
	for name, reqs := range map[string][]svgRequest{"fixed": fixed, "sliding": sliding, "bucket": bucket, "log": log} {
		var got [4]int
		for p := range got {
			got[p] = svgAdmitted(reqs, p)
		}
		assert.Equal(t, want[name], got, "%s: admitted per phase", name)
	}
	assert.Equal(t, 58, svgAdmitted(fixed, -1), "fixed: admitted in all")
	assert.Equal(t, 46, svgAdmitted(sliding, -1), "sliding: admitted in all")
	assert.Equal(t, 63, svgAdmitted(bucket, -1), "bucket: admitted in all")

	// The boundary burst: the fixed window lets through twice what the
	// sliding window does, and more than the limit, in one second.
	burst := svgAdmittedIn(fixed, 19_500, 20_500)
	assert.GreaterOrEqual(t, burst, 2*svgAdmittedIn(sliding, 19_500, 20_500))
	assert.Greater(t, burst, int64(svgMax))

	// Fixed window: never more than Max in one of its windows, which start
	// where the doc says, but up to 2*Max in a span of one window's length
	// that straddles two: here 19, in [11 s, 21 s).
	starts := svgFixedStarts(fixed, svgWindow)
	assert.Equal(t, []int64{0, 10_000, 20_000, 36_000, 46_000, 56_000}, starts, "fixed: window starts")
	for _, s := range starts {
		assert.LessOrEqual(t, svgAdmittedIn(fixed, s, s+svgWindow), int64(svgMax), "fixed: window from %d ms", s)
	}
	assert.Equal(t, int64(19), svgMostIn(fixed, svgWindow), "fixed: most in any 10 s")

	// Sliding window: its windows run from its first request (0 s) in 10 s
	// steps, as its count never went back to zero. Never more than Max in
	// one, and at every admission the estimate it promises to hold,
	// previous*(W-elapsed)/W + current, is at most Max. The estimate takes
	// the previous window's requests as spread evenly; when they came at its
	// end it lets more through in a span of W: 14 in [36 s, 46 s), as the 8
	// of [30 s, 40 s) all came in its last 4 s, yet count at 44 s as
	// 8*0.6 = 4.8.
	for _, r := range sliding {
		if !r.admitted {
			continue
		}
		start := r.at / svgWindow * svgWindow
		cur := svgAdmittedIn(sliding, start, r.at+1)
		prev := svgAdmittedIn(sliding, start-svgWindow, start)
		assert.LessOrEqual(t, prev*(svgWindow-(r.at-start))+cur*svgWindow, int64(svgMax*svgWindow),
			"sliding: estimate at %d ms", r.at)
		assert.LessOrEqual(t, svgAdmittedIn(sliding, start, start+svgWindow), int64(svgMax), "sliding: window from %d ms", start)
	}
	assert.Equal(t, int64(14), svgMostIn(sliding, svgWindow), "sliding: most in any 10 s")

	// Token bucket: in any span, at most a full bucket plus what refills
	// over it, Max per W: admitted(t1..t2)*W <= Burst*W + (t2-t1)*Max.
	for i, a := range bucket {
		for _, b := range bucket[i:] {
			if a.admitted && b.admitted {
				n := svgAdmittedIn(bucket, a.at, b.at+1)
				assert.LessOrEqual(t, n*svgWindow, svgMax*svgWindow+(b.at-a.at)*svgMax,
					"bucket: from %d ms to %d ms", a.at, b.at)
			}
		}
	}
	// From a full bucket under steady overload it admits exactly that bound:
	// the 10 tokens it held at 36 s and the 23 that refilled by 59.5 s.
	last := phases[3].times[len(phases[3].times)-1]
	refilled := (last - phases[3].times[0]) * svgMax / svgWindow
	assert.Equal(t, svgMax+int(refilled), svgAdmitted(bucket, 3), "bucket: Burst plus refill from 36 s")
	assert.Equal(t, int64(19), svgMostIn(bucket, svgWindow), "bucket: most in any 10 s")

	// Sliding log: exactly Max in its busiest span of one window, never
	// more.
	assert.Equal(t, int64(svgMax), svgMostIn(log, svgWindow), "log: most in any 10 s")

	got := svgDraw(phases, []svgLane{
		{name: "Fixed window", reqs: fixed, starts: starts},
		{name: "Sliding window", reqs: sliding},
		{name: "Token bucket", reqs: bucket},
		{name: "Sliding log", reqs: log},
	})
	if *updateSVG {
		require.NoError(t, os.MkdirAll(filepath.Dir(svgPath), 0o755))
		require.NoError(t, os.WriteFile(svgPath, []byte(got), 0o644))
		t.Logf("wrote %s (%d bytes)", svgPath, len(got))
		return
	}
	old, err := os.ReadFile(svgPath)
	require.NoError(t, err, "%s is missing; create it with: %s", svgPath, svgRegenerate)
	if string(old) != got {
		t.Fatalf("%s differs from what the code draws now (%s); regenerate it with: %s",
			svgPath, svgFirstDiff(string(old), got), svgRegenerate)
	}
}

// svgFirstDiff describes the first line where the file on disk and the
// drawing differ.
func svgFirstDiff(old, got string) string {
	a, b := strings.Split(old, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return fmt.Sprintf("first at line %d: file has %q, code draws %q", i+1, x, y)
		}
	}
	return "same lines, different bytes"
}

// Layout of the picture, in px. Time runs from 0 to svgSeconds along a plot
// svgPxPerSecond wide a second; requests in the same svgBucket ms are
// stacked, the earliest at the bottom.
const (
	svgWidth       = 900
	svgPlotLeft    = 150
	svgPxPerSecond = 12
	svgSeconds     = 60
	svgBucket      = 500
	svgLaneTop     = 96
	svgLaneHeight  = 120
	svgLaneGap     = 10
	svgStackPitch  = 6.5
	svgGreen       = "#1a7f37"
	svgRed         = "#cf222e"
	svgInk         = "#24292f"
	svgMuted       = "#57606a"
)

// svgX is the x coordinate of time ms.
func svgX(ms int64) float64 {
	return svgPlotLeft + float64(ms)/1000*svgPxPerSecond
}

// svgNum formats a coordinate with at most two decimals, the same way on
// every machine.
func svgNum(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// svgDraw renders the lanes as a self-contained SVG document: a title with
// the rule, the phases of the traffic, one lane per algorithm with every
// request as a mark, a time axis and a legend.
func svgDraw(phases []svgPhase, lanes []svgLane) string {
	plotRight := svgX(svgSeconds * 1000)
	axisY := float64(svgLaneTop + len(lanes)*(svgLaneHeight+svgLaneGap) - svgLaneGap)
	legendY := axisY + 48
	height := legendY + 22

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%s" viewBox="0 0 %d %s" font-family="sans-serif" font-size="12" fill="%s">`,
		svgWidth, svgNum(height), svgWidth, svgNum(height), svgInk)
	p(`<title>Fixed window, sliding window, token bucket and sliding log under the same traffic, 10 requests per 10 s</title>`)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>`)
	p(`<text x="16" y="28" font-size="17" font-weight="bold">10 requests per 10 s; same traffic for all four</text>`)
	p(`<text x="16" y="48" fill="%s">Each mark is one request from one client, stacked per 0.5 s, earliest at the bottom; drawn by TestAlgorithmsSVG from the real middleware.</text>`, svgMuted)

	// The phases of the traffic, each with a bracket over its span.
	for _, ph := range phases {
		x1 := svgX(ph.times[0] / svgBucket * svgBucket)
		x2 := svgX((ph.times[len(ph.times)-1]/svgBucket + 1) * svgBucket)
		p(`<path d="M%s 84V88H%sV84" fill="none" stroke="%s"/>`, svgNum(x1), svgNum(x2), svgMuted)
		p(`<text x="%s" y="78" text-anchor="middle" font-size="11" fill="%s">%s</text>`,
			svgNum(max((x1+x2)/2, svgPlotLeft+27)), svgMuted, ph.label)
	}

	for i, lane := range lanes {
		top := float64(svgLaneTop + i*(svgLaneHeight+svgLaneGap))
		base := top + svgLaneHeight - 8 // centre of the lowest mark
		p(`<g>`)
		p(`<rect x="%d" y="%s" width="%s" height="%d" fill="#f6f8fa"/>`, svgPlotLeft, svgNum(top), svgNum(plotRight-svgPlotLeft), svgLaneHeight)
		for s := int64(10); s < svgSeconds; s += 10 {
			p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#d0d7de" stroke-width="0.5"/>`,
				svgNum(svgX(s*1000)), svgNum(top), svgNum(svgX(s*1000)), svgNum(top+svgLaneHeight))
		}
		for _, s := range lane.starts { // below the counts of the phases
			p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-dasharray="4 3"/>`,
				svgNum(svgX(s)), svgNum(top+22), svgNum(svgX(s)), svgNum(top+svgLaneHeight), svgMuted)
		}
		p(`<text x="16" y="%s" font-size="14" font-weight="bold">%s</text>`, svgNum(top+50), lane.name)
		p(`<text x="16" y="%s">admitted %d / %d</text>`, svgNum(top+70), svgAdmitted(lane.reqs, -1), len(lane.reqs))

		// Admitted out of sent per phase, over the phase.
		for k, ph := range phases {
			sent := 0
			for _, r := range lane.reqs {
				if r.phase == k {
					sent++
				}
			}
			x1 := svgX(ph.times[0] / svgBucket * svgBucket)
			x2 := svgX((ph.times[len(ph.times)-1]/svgBucket + 1) * svgBucket)
			p(`<text x="%s" y="%s" text-anchor="middle" font-size="11" fill="%s">%d of %d</text>`,
				svgNum(max((x1+x2)/2, svgPlotLeft+24)), svgNum(top+15), svgMuted, svgAdmitted(lane.reqs, k), sent)
		}

		// The requests, stacked per bucket in time order.
		stack := map[int64]int{}
		var ok, no strings.Builder
		for _, r := range lane.reqs {
			bucket := r.at / svgBucket
			x := svgX(bucket*svgBucket + svgBucket/2)
			y := base - float64(stack[bucket])*svgStackPitch
			stack[bucket]++
			if r.admitted {
				fmt.Fprintf(&ok, "<circle cx=\"%s\" cy=\"%s\" r=\"2.6\"/>\n", svgNum(x), svgNum(y))
			} else {
				fmt.Fprintf(&no, "<path d=\"M%s %sl4.4 4.4m0-4.4l-4.4 4.4\"/>\n", svgNum(x-2.2), svgNum(y-2.2))
			}
		}
		p(`<g fill="%s">`, svgGreen)
		b.WriteString(ok.String())
		p(`</g>`)
		p(`<g fill="none" stroke="%s" stroke-width="1.4" stroke-linecap="round">`, svgRed)
		b.WriteString(no.String())
		p(`</g>`)
		p(`</g>`)
	}

	// The time axis.
	p(`<path d="M%d %sH%s" stroke="%s"/>`, svgPlotLeft, svgNum(axisY), svgNum(plotRight), svgInk)
	for s := int64(0); s <= svgSeconds; s += 5 {
		x := svgNum(svgX(s * 1000))
		p(`<path d="M%s %sv5" stroke="%s"/>`, x, svgNum(axisY), svgInk)
		p(`<text x="%s" y="%s" text-anchor="middle">%d</text>`, x, svgNum(axisY+18), s)
	}
	p(`<text x="%d" y="%s" text-anchor="end">time (s)</text>`, svgPlotLeft-8, svgNum(axisY+18))

	// The legend.
	ly := svgNum(legendY)
	p(`<circle cx="%d" cy="%s" r="3.2" fill="%s"/>`, svgPlotLeft+4, svgNum(legendY-4), svgGreen)
	p(`<text x="%d" y="%s">admitted (200)</text>`, svgPlotLeft+14, ly)
	p(`<path d="M%d %sl5.6 5.6m0-5.6l-5.6 5.6" fill="none" stroke="%s" stroke-width="1.6" stroke-linecap="round"/>`,
		svgPlotLeft+121, svgNum(legendY-6.8), svgRed)
	p(`<text x="%d" y="%s">rejected (429)</text>`, svgPlotLeft+134, ly)
	p(`<path d="M%d %sv14" stroke="%s" stroke-dasharray="4 3"/>`, svgPlotLeft+244, svgNum(legendY-11), svgMuted)
	p(`<text x="%d" y="%s">a fixed window starts</text>`, svgPlotLeft+252, ly)
	p(`<text x="%s" y="%s" text-anchor="end" fill="%s">rule: Max 10, Expiration 10 s, Burst 10 (default)</text>`,
		svgNum(plotRight), ly, svgMuted)
	p(`</svg>`)
	return b.String()
}
