package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// table is one fixed-width, markdown-style table with a title and notes.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

// add appends a row.
func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// write renders the table: the title, the header, a rule, the rows (the
// first column left-aligned, the others right-aligned), then the notes. It
// returns the first write error.
func (t *table) write(w io.Writer) error {
	ew := &errWriter{w: w}
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, row := range t.rows {
		for i, c := range row {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	line := func(cells []string) {
		var sb strings.Builder
		sb.WriteString("|")
		for i, wd := range widths {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", wd-utf8.RuneCountInString(c))
			if i == 0 {
				sb.WriteString(" " + c + pad + " |")
			} else {
				sb.WriteString(" " + pad + c + " |")
			}
		}
		ew.println(sb.String())
	}
	ew.printf("\n## %s\n\n", t.title)
	line(t.header)
	var rule strings.Builder
	rule.WriteString("|")
	for i, wd := range widths {
		if i == 0 {
			rule.WriteString(":" + strings.Repeat("-", wd+1) + "|")
		} else {
			rule.WriteString(strings.Repeat("-", wd+1) + ":|")
		}
	}
	ew.println(rule.String())
	for _, row := range t.rows {
		line(row)
	}
	for _, n := range t.notes {
		ew.println("  " + n)
	}
	return ew.err
}

// fmtRate writes a rate per second with a k or M suffix.
func fmtRate(r float64) string {
	switch {
	case math.IsNaN(r):
		return "-"
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	default:
		return fmt.Sprintf("%.0f", r)
	}
}

// fmtRatio writes a ratio as a multiplier.
func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	if x >= 10 {
		return fmt.Sprintf("%.1fx", x)
	}
	return fmt.Sprintf("%.2fx", x)
}

// fmtNs writes nanoseconds with one decimal, with a sign when signed.
func fmtNs(ns float64, signed bool) string {
	if math.IsNaN(ns) {
		return "-"
	}
	if signed {
		return fmt.Sprintf("%+.1f", ns)
	}
	return fmt.Sprintf("%.1f", ns)
}

// fmtMicros writes nanoseconds as microseconds, with a precision that
// suits the size.
func fmtMicros(ns float64) string {
	us := ns / 1e3
	switch {
	case math.IsNaN(us):
		return "-"
	case us < 10:
		return fmt.Sprintf("%.1f", us)
	default:
		return fmt.Sprintf("%.0f", us)
	}
}

// fmtFloat writes x with three significant digits, small values included
// (a script call per thousands of decisions).
func fmtFloat(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
