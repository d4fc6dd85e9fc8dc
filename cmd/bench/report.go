package main

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// table renders rows as aligned text or as a Markdown table.
type table struct {
	head []string
	rows [][]string
}

// text renders t as aligned columns, each row indented by two spaces.
func (t table) text() string {
	width := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range append([][]string{t.head}, t.rows...) {
		b.WriteString("  ")
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (t table) markdown() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n|")
	for i := range t.head {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

func msf(d time.Duration) string { return strconv.FormatFloat(msOf(d), 'f', 2, 64) }
func usf(d time.Duration) string { return strconv.FormatFloat(d.Seconds()*1e6, 'f', 0, 64) }
func rate(r float64) string      { return strconv.FormatFloat(r, 'f', 0, 64) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

// shown is a/b as the tables show it, so a verdict agrees with its figure.
func shown(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return math.Round(a/b*100) / 100
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// refRate is the rate at which servers are compared at equal load: 1000/s
// when it was measured, else the first fixed rate.
func (r *results) refRate() float64 {
	for _, x := range r.Opts.rates {
		if x == 1000 {
			return x
		}
	}
	if len(r.Opts.rates) > 0 {
		return r.Opts.rates[0]
	}
	return r.Half
}

func (r *results) maxLabel(target string) string {
	lo, hi := r.Max[target], r.MaxFail[target]
	switch {
	case lo == 0 && hi == 0:
		return "-"
	case lo == 0:
		return "< " + rate(hi)
	case hi == 0:
		return "≥ " + rate(lo)
	}
	return rate(lo)
}

// summary compares project and floor against the targets docs/BENCHMARKS.md
// lists.
func (r *results) summary() table {
	t := table{head: []string{"", "project", "floor", "project/floor", "target", ""}}
	slo := strings.TrimSuffix(msf(r.Opts.slo), ".00") + " ms"
	pm, fm := r.Max["project"], r.Max["floor"]
	t.rows = append(t.rows, []string{"charges/s with p99 < " + slo + " (open model)", r.maxLabel("project"), r.maxLabel("floor"),
		ratio(pm, fm), "≥ 0.80", verdict(shown(pm, fm) >= 0.8)})
	if p, f := r.find("closed", "project", 0), r.find("closed", "floor", 0); p != nil && f != nil {
		t.rows = append(t.rows, []string{fmt.Sprintf("closed-loop peak, %d workers (charges/s)", p.Workers),
			rate(p.Achieved), rate(f.Achieved), ratio(p.Achieved, f.Achieved), "", ""})
	}
	ref := r.refRate()
	if p, f := r.at("project", ref), r.at("floor", ref); p != nil && f != nil {
		at := " at " + rate(ref) + "/s"
		pt, ft := p.CPU.Total().Seconds(), f.CPU.Total().Seconds()
		t.rows = append(t.rows,
			[]string{"CPU µs per charge" + at + ", server + Postgres + Redis", usf(p.CPU.Total()), usf(f.CPU.Total()),
				ratio(pt, ft), "≤ 1.5", verdict(shown(pt, ft) <= 1.5)},
			[]string{"CPU µs per charge" + at + ", server process alone", usf(p.CPU.Server), usf(f.CPU.Server),
				ratio(p.CPU.Server.Seconds(), f.CPU.Server.Seconds()), "project < 257", verdict(p.CPU.Server < 257*time.Microsecond)},
			[]string{"CPU µs per charge" + at + ", Postgres", usf(p.CPU.Postgres), usf(f.CPU.Postgres),
				ratio(p.CPU.Postgres.Seconds(), f.CPU.Postgres.Seconds()), "", ""},
			[]string{"CPU µs per charge" + at + ", Redis", usf(p.CPU.Redis), usf(f.CPU.Redis),
				ratio(p.CPU.Redis.Seconds(), f.CPU.Redis.Seconds()), "", ""},
			[]string{"p50 ms" + at, msf(p.P50), msf(f.P50), ratio(p.P50.Seconds(), f.P50.Seconds()), "", ""},
			[]string{"p99 ms" + at, msf(p.P99), msf(f.P99), ratio(p.P99.Seconds(), f.P99.Seconds()), "", ""},
		)
	}
	if p, f := r.at("project", r.Half), r.at("floor", r.Half); p != nil && f != nil && r.Half > 0 {
		t.rows = append(t.rows, []string{"p50 / p99 ms at half the project's peak (" + rate(r.Half) + "/s)",
			msf(p.P50) + " / " + msf(p.P99), msf(f.P50) + " / " + msf(f.P99), "", "< 3 / < 10",
			verdict(p.P50 < 3*time.Millisecond && p.P99 < 10*time.Millisecond)})
	}
	return t
}

func redisCalls(m map[string]float64) string {
	var names []string
	for n, v := range m {
		if v >= 0.05 {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		return m[names[i]] > m[names[j]] || m[names[i]] == m[names[j]] && names[i] < names[j]
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2g", n, m[n]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// redisLines lists the Redis commands per charge of each server at the
// reference rate: the round trips a charge makes.
func (r *results) redisLines() []string {
	var out []string
	for _, name := range []string{"project", "floor"} {
		if s := r.at(name, r.refRate()); s != nil {
			out = append(out, fmt.Sprintf("%s: %s (%.0f µs of Redis command time per charge)", name, redisCalls(s.RedisCalls), s.RedisUsec))
		}
	}
	return out
}

// steps is every measured step.
func (r *results) steps() table {
	t := table{head: []string{"phase", "server", "rate/s", "ok/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors", "dropped",
		"server µs", "pg µs", "redis µs", "total µs", "loadgen µs", "busy cores", "others", "gen lag p99 ms", "p99 ok"}}
	for _, s := range r.Steps {
		load := rate(s.Rate)
		if s.Rate == 0 {
			load = strconv.Itoa(s.Workers) + " workers"
		}
		pass := "yes"
		if !s.Pass {
			pass = "no"
		}
		lag := msf(s.LagP99)
		if s.Phase == "closed" {
			pass, lag = "-", "-"
		}
		t.rows = append(t.rows, []string{s.Phase, s.Target, load, rate(s.Achieved), msf(s.P50), msf(s.P99), msf(s.P999), msf(s.Max),
			strconv.Itoa(s.Errors), strconv.Itoa(s.Dropped), usf(s.CPU.Server), usf(s.CPU.Postgres), usf(s.CPU.Redis),
			usf(s.CPU.Total()), usf(s.CPU.Loadgen), strconv.FormatFloat(s.CPU.BusyCores, 'f', 2, 64),
			strconv.FormatFloat(s.CPU.OtherCores, 'f', 2, 64), lag, pass})
	}
	return t
}

// notes are this run's caveats: failures seen, and how busy the machine was
// with processes other than the ones measured.
func (r *results) notes() []string {
	notes := append([]string(nil), r.Notes...)
	var worst float64
	for _, s := range r.Steps {
		worst = max(worst, s.CPU.OtherCores)
		if len(s.Samples) > 0 && s.Phase != "search" {
			notes = append(notes, fmt.Sprintf("%s %s %s: %s", s.Phase, s.Target, rate(s.Rate), strings.Join(s.Samples, " | ")))
		}
	}
	if worst > 0.25 {
		notes = append(notes, fmt.Sprintf("Other processes on this machine used up to %.2f of its %d cores during a step (column \"others\"): "+
			"the absolute figures are lower than on a quiet machine; the project/floor ratios, measured alternately, hold better.", worst, r.Host.CPUs))
	}
	return notes
}

func (r *results) header() string {
	h := r.Host
	return fmt.Sprintf("%d CPUs (%s), Linux %s, %s, PostgreSQL %s, Redis %s (private, no persistence)",
		h.CPUs, h.Model, h.Kernel, h.Go, h.Postgres, h.Redis)
}

func (r *results) method() string {
	tables := "copies of the project's (columns, checks, indexes; no foreign keys)"
	if r.Opts.floorTables == "lean" {
		tables = "lean (the project's columns and primary keys only)"
	}
	return fmt.Sprintf("open model: constant arrival rate, latency from the scheduled send, %s per step, at most %d in flight; "+
		"a step passes with p99 < %s and errors + dropped ≤ 0.1%%. Closed loop: %d workers for %s. Floor tables: %s.",
		r.Opts.step, r.Opts.maxInflight, r.Opts.slo, r.Opts.workers, r.Opts.closedFor, tables)
}

// noiseLine describes the do-nothing server's latencies.
func (r *results) noiseLine() string {
	var parts []string
	for i, n := range r.Noise {
		when := "at the start"
		if i > 0 {
			when = "at the end"
		}
		parts = append(parts, fmt.Sprintf("%s p50 %s ms, p99 %s ms (generator lag p99 %s ms)", when, msf(n.P50), msf(n.P99), msf(n.LagP99)))
	}
	return "Noise floor, a do-nothing server inside the harness at 1000/s for 3 s: " + strings.Join(parts, "; ") + "."
}

func (r *results) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nGatehouse POST /v1/charges, %s (took %s)\n", r.Start.Format("2006-01-02 15:04 MST"), r.End.Sub(r.Start).Round(time.Second))
	fmt.Fprintf(&b, "%s\n%s\n%s\n\n", r.header(), r.method(), r.noiseLine())
	if len(r.Steps) > 0 {
		b.WriteString(r.summary().text())
		fmt.Fprintf(&b, "\nRedis commands per charge at %s/s:\n", rate(r.refRate()))
		for _, l := range r.redisLines() {
			b.WriteString("  " + l + "\n")
		}
	}
	if t := r.scenarios(); len(t.rows) > 0 {
		b.WriteString("\nLoad scenarios (L1-L4 and the login flood, docs/BENCHMARKS.md):\n")
		b.WriteString(t.text())
		b.WriteString(r.scenarioDetails(false))
	}
	if r.Webhooks != nil {
		b.WriteString(r.Webhooks.text())
	}
	if r.Path != nil {
		b.WriteString(r.Path.text())
	}
	if len(r.Steps) > 0 {
		b.WriteString("\nEvery step (CPU columns are µs per request; busy/others in cores of the whole machine):\n")
		b.WriteString(r.steps().text())
	}
	for _, name := range []string{"project", "floor"} {
		if p := r.Profiles[name]; p != "" {
			b.WriteString("\nperf: " + p)
		}
	}
	if n := r.notes(); len(n) > 0 {
		b.WriteString("\nNotes:\n")
		for _, x := range n {
			b.WriteString("  - " + x + "\n")
		}
	}
	return b.String()
}

func (r *results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s by `make bench` (took %s).\n\n", r.Start.Format("2006-01-02 15:04 MST"), r.End.Sub(r.Start).Round(time.Second))
	fmt.Fprintf(&b, "%s. %s\n\n%s\n\n", r.header(), capitalize(r.method()), r.noiseLine())
	b.WriteString(r.plotsMarkdown())
	if len(r.Steps) > 0 {
		b.WriteString("### Against the targets\n\n")
		b.WriteString(r.summary().markdown())
		fmt.Fprintf(&b, "\nRedis commands per charge at %s/s:\n\n", rate(r.refRate()))
		for _, l := range r.redisLines() {
			b.WriteString("- " + l + "\n")
		}
	}
	if t := r.scenarios(); len(t.rows) > 0 {
		b.WriteString("\n### Load scenarios\n\nL1-L4 (docs/reliability.md) and the login flood; the method is above.\n\n")
		b.WriteString(t.markdown())
		b.WriteString(r.scenarioDetails(true))
	}
	if r.Webhooks != nil {
		b.WriteString(r.Webhooks.markdown())
	}
	if r.Path != nil {
		b.WriteString(r.Path.markdown())
	}
	if len(r.Steps) > 0 {
		b.WriteString("\n### Every step\n\nIn run order. CPU columns are µs of CPU per request; *busy cores* is the whole machine, " +
			"*others* the part of it used by processes other than the server, Postgres, Redis and the load generator.\n\n")
		b.WriteString(r.steps().markdown())
	}
	for _, name := range []string{"project", "floor"} {
		if p := r.Profiles[name]; p != "" {
			b.WriteString("\n### perf profile\n\n```\n" + p + "```\n")
		}
	}
	if n := r.notes(); len(n) > 0 {
		b.WriteString("\n### Notes on this run\n\n")
		for _, x := range n {
			b.WriteString("- " + x + "\n")
		}
	}
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

const (
	docBegin = "<!-- bench:results:begin (written by make bench; edits between these markers are lost) -->"
	docEnd   = "<!-- bench:results:end -->"
)

// writeDoc replaces the results section of path, from the begin marker to
// the first end marker after it; a file without them gets them appended.
func writeDoc(path, results string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	section := docBegin + "\n\n" + results + "\n" + docEnd
	i := strings.Index(doc, docBegin)
	j := -1
	if i >= 0 {
		j = strings.Index(doc[i:], docEnd) // the end marker after the begin marker
	}
	if j >= 0 {
		doc = doc[:i] + section + doc[i+j+len(docEnd):]
	} else {
		if doc == "" {
			doc = "# Benchmarks\n"
		}
		doc = strings.TrimRight(doc, "\n") + "\n\n## Latest results\n\n" + section + "\n"
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
