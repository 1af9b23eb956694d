package loadgen

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a Run counted.
type Report struct {
	Path        string
	Requests    int
	Concurrency int // workers that ran: at most Requests
	Elapsed     time.Duration
	// Targets holds the counts of each target, in the order given.
	Targets []Counts
	// Total sums Targets.
	Total Counts
	// Latency summarizes the requests that got a response.
	Latency Latency
	// OtherStatuses counts the responses neither 200 nor 429, by status.
	OtherStatuses map[int]int
	// FirstError is the first transport error in request order, or nil.
	FirstError error
}

// Counts are the outcomes of the requests sent to one target, or to all.
type Counts struct {
	Target string
	// Replica is the X-Replica header the target answered with: "-" when
	// it sent none, "mixed" when it sent several values.
	Replica  string
	Admitted int // status 200
	Rejected int // status 429
	Other    int // any other status
	Errors   int // no response: refused, reset, timed out
}

// Latency is a summary of response times, by nearest rank.
type Latency struct {
	Responses               int
	Min, P50, P90, P99, Max time.Duration
}

// newReport counts outcomes, where outcome i went to bases[i % len(bases)]
// + path.
func newReport(opts Options, bases []string, path string, outcomes []outcome, elapsed time.Duration) *Report {
	r := &Report{
		Path:          path,
		Requests:      opts.Requests,
		Concurrency:   min(opts.Concurrency, opts.Requests),
		Elapsed:       elapsed,
		Targets:       make([]Counts, len(bases)),
		Total:         Counts{Target: "total", Replica: "-"},
		OtherStatuses: map[int]int{},
	}
	for i, base := range bases {
		r.Targets[i].Target = base
	}
	latencies := make([]time.Duration, 0, len(outcomes))
	for i, o := range outcomes {
		c := &r.Targets[i%len(bases)]
		switch {
		case o.err != nil:
			c.Errors++
			r.Total.Errors++
			if r.FirstError == nil {
				r.FirstError = o.err
			}
			continue
		case o.status == 200:
			c.Admitted++
			r.Total.Admitted++
		case o.status == 429:
			c.Rejected++
			r.Total.Rejected++
		default:
			c.Other++
			r.Total.Other++
			r.OtherStatuses[o.status]++
		}
		switch c.Replica {
		case "":
			c.Replica = o.replica
		case o.replica, "mixed":
		default:
			c.Replica = "mixed"
		}
		latencies = append(latencies, o.latency)
	}
	for i := range r.Targets {
		if r.Targets[i].Replica == "" {
			r.Targets[i].Replica = "-"
		}
	}
	r.Latency = summarize(latencies)
	return r
}

// summarize sorts latencies and picks the summary's ranks.
func summarize(latencies []time.Duration) Latency {
	if len(latencies) == 0 {
		return Latency{}
	}
	slices.Sort(latencies)
	rank := func(p int) time.Duration { // nearest rank: ceil(p/100 * n)
		return latencies[max((p*len(latencies)+99)/100, 1)-1]
	}
	return Latency{
		Responses: len(latencies),
		Min:       latencies[0],
		P50:       rank(50),
		P90:       rank(90),
		P99:       rank(99),
		Max:       latencies[len(latencies)-1],
	}
}

// Write prints the report: a table with a row per target and a total row,
// whose columns are target, replica, admitted(200), rejected(429), other
// and errors, then the latency summary.
func (r *Report) Write(w io.Writer) error {
	var b strings.Builder
	rate := float64(r.Requests) / max(r.Elapsed.Seconds(), 1e-9)
	fmt.Fprintf(&b, "GET %s: %s round-robin over %s, %s, %v (%.0f req/s)\n\n",
		r.Path, plural(r.Requests, "request"), plural(len(r.Targets), "target"), plural(r.Concurrency, "worker"),
		r.Elapsed.Round(time.Millisecond), rate)

	// tw writes to a strings.Builder, which cannot fail: neither can tw.
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "target\treplica\tadmitted(200)\trejected(429)\tother\terrors")
	for _, c := range append(slices.Clone(r.Targets), r.Total) {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", c.Target, c.Replica, c.Admitted, c.Rejected, c.Other, c.Errors)
	}
	_ = tw.Flush()

	if len(r.OtherStatuses) > 0 {
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(r.OtherStatuses)) {
			parts = append(parts, fmt.Sprintf("%d ×%d", s, r.OtherStatuses[s]))
		}
		fmt.Fprintf(&b, "\nother statuses: %s\n", strings.Join(parts, ", "))
	}
	if r.FirstError != nil {
		fmt.Fprintf(&b, "\n%s got no response; the first: %v\n", plural(r.Total.Errors, "request"), r.FirstError)
	}
	l := r.Latency
	if l.Responses == 0 {
		b.WriteString("\nlatency: no responses\n")
	} else {
		fmt.Fprintf(&b, "\nlatency over %d responses: min %v  p50 %v  p90 %v  p99 %v  max %v\n",
			l.Responses, round(l.Min), round(l.P50), round(l.P90), round(l.P99), round(l.Max))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// round keeps three significant figures or so of a latency.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
