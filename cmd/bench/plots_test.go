package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// chargeStep is an open-model charge step with its latencies in ms.
func chargeStep(phase, target string, rate, p50, p99 float64) step {
	s := step{Phase: phase, Target: target, Rate: rate}
	s.P50, s.P99 = time.Duration(p50*float64(time.Millisecond)), time.Duration(p99*float64(time.Millisecond))
	return s
}

// pathStepAt is a path step with its first-attempt latencies in ms and its
// CPU per charge in µs (API, worker, Postgres, Redis).
func pathStepAt(events, p50, p99 float64, cpu ...time.Duration) pathStep {
	s := pathStep{Events: events, Lat: latencies{P50: time.Duration(p50 * float64(time.Millisecond)), P99: time.Duration(p99 * float64(time.Millisecond))}}
	s.API, s.Worker, s.PG, s.Redis = cpu[0]*time.Microsecond, cpu[1]*time.Microsecond, cpu[2]*time.Microsecond, cpu[3]*time.Microsecond
	return s
}

// chargeResults are charge steps of both servers, out of rate order, with a
// closed-loop step and one step that completed nothing.
func chargeResults() *results {
	r := &results{Opts: options{slo: 10 * time.Millisecond}}
	closed := chargeStep("closed", "project", 0, 19, 28)
	closed.Workers = 32
	r.Steps = []step{
		closed,
		chargeStep("fixed", "floor", 500, 1.07, 1.97),
		chargeStep("fixed", "project", 500, 1.39, 3.82),
		chargeStep("fixed", "project", 2000, 277, 405),
		chargeStep("fixed", "floor", 2000, 1.54, 174.78),
		chargeStep("half", "project", 800, 1.40, 12.22),
		chargeStep("search", "project", 650, 1.22, 5.54),
		chargeStep("search", "floor", 1500, 0, 0),
	}
	return r
}

// pathResults are path steps, the search's among them out of rate order.
func pathResults() *results {
	return &results{Path: &pathResult{Steps: []pathStep{
		pathStepAt(200, 32.36, 75.75, 1127, 2177, 3140, 902),
		pathStepAt(1000, 838.91, 2239.82, 597, 1421, 2712, 564),
		pathStepAt(600, 77.53, 351.28, 704, 1608, 2892, 624),
	}}}
}

// svgTexts reads an SVG file through an XML decoder and returns the name of
// its root element and the text of its <text> elements.
func svgTexts(t *testing.T, path string) (root string, texts []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	var inText bool
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(tok)))
			}
		}
	}
	return root, texts
}

// TestPlotsShowTheRunsSteps draws each plot from known steps and reads the
// files back: SVG documents with their titles, axis labels, legend and
// rates.
func TestPlotsShowTheRunsSteps(t *testing.T) {
	r := chargeResults()
	r.Path = pathResults().Path
	dir := filepath.Join(t.TempDir(), "img")
	files, err := writePlots(r, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"bench-latency.svg": {"project p50", "project p99", "floor p50", "floor p99", "p99 target 10 ms",
			"offered rate (charges/s)", "latency (ms, log scale)", "1", "10", "100", "1000"},
		"bench-cpu.svg": {"API", "worker", "Postgres", "Redis", "CPU µs per charge", "events/s (two per charge)", "200", "600", "1000"},
		"bench-path-p99.svg": {"first attempt p50", "first attempt p99", "p99 target 250 ms", "events/s (two per charge)",
			"first attempt (ms, log scale)"},
	}
	if len(files) != len(want) {
		t.Fatalf("wrote %d plots, want %d: %v", len(files), len(want), files)
	}
	for _, f := range files {
		texts, ok := want[filepath.Base(f.Path)]
		if !ok || filepath.Dir(f.Path) != dir {
			t.Errorf("unexpected plot %s", f.Path)
			continue
		}
		root, got := svgTexts(t, f.Path)
		if root != "svg" {
			t.Errorf("%s: root element <%s>, want <svg>", f.Path, root)
		}
		for _, w := range texts {
			if !slices.Contains(got, w) {
				t.Errorf("%s: no text %q among %q", filepath.Base(f.Path), w, got)
			}
		}
		if f.Alt == "" || f.Caption == "" {
			t.Errorf("%s: no alt text or caption", f.Path)
		}
	}
}

// TestPlotsOfOneStep: a run of one step per scenario draws every plot.
func TestPlotsOfOneStep(t *testing.T) {
	r := &results{Opts: options{slo: 10 * time.Millisecond}, Steps: []step{chargeStep("fixed", "project", 1000, 2, 10)},
		Path: &pathResult{Steps: []pathStep{pathStepAt(500, 40, 120, 700, 1600, 2700, 600)}}}
	files, err := writePlots(r, t.TempDir())
	if err != nil || len(files) != len(plotSpecs) {
		t.Fatalf("one step drew %v, %v; want every plot", files, err)
	}
	for _, f := range files {
		if root, _ := svgTexts(t, f.Path); root != "svg" {
			t.Errorf("%s: root <%s>", f.Path, root)
		}
	}
}

// TestChargeSeries: one point per open-model step of the target, by rate,
// in ms; closed-loop steps, the other server and steps with no latency are
// left out.
func TestChargeSeries(t *testing.T) {
	p50, p99 := chargeResults().chargeSeries("project")
	want50 := plotter.XYs{{X: 500, Y: 1.39}, {X: 650, Y: 1.22}, {X: 800, Y: 1.4}, {X: 2000, Y: 277}}
	want99 := plotter.XYs{{X: 500, Y: 3.82}, {X: 650, Y: 5.54}, {X: 800, Y: 12.22}, {X: 2000, Y: 405}}
	near := func(a, b plotter.XY) bool { return a.X == b.X && a.Y-b.Y < 1e-9 && b.Y-a.Y < 1e-9 }
	if !slices.EqualFunc(p50, want50, near) || !slices.EqualFunc(p99, want99, near) {
		t.Errorf("project series:\np50 %v, want %v\np99 %v, want %v", p50, want50, p99, want99)
	}
	if f50, _ := chargeResults().chargeSeries("floor"); len(f50) != 2 {
		t.Errorf("floor p50 series %v: want the two steps with latencies", f50)
	}
}

// TestPlotsNeedTheirScenario: a plot whose scenario did not run is not
// drawn, and an earlier run's file of it is left as it was.
func TestPlotsNeedTheirScenario(t *testing.T) {
	for name, draw := range map[string]func(*results) (*plot.Plot, error){
		"latency": (*results).latencyPlot, "cpu": (*results).pathCPUPlot, "path p99": (*results).pathLatencyPlot,
	} {
		if _, err := draw(&results{Path: &pathResult{}}); !errors.Is(err, errNoData) {
			t.Errorf("%s plot of a run without its steps: err %v, want errNoData", name, err)
		}
	}

	dir := t.TempDir()
	earlier := []byte("<svg>an earlier run's latency</svg>")
	if err := os.WriteFile(filepath.Join(dir, "bench-latency.svg"), earlier, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := writePlots(pathResults(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Path))
	}
	if !slices.Equal(names, []string{"bench-cpu.svg", "bench-path-p99.svg"}) {
		t.Errorf("a path-only run drew %v, want the path's two plots", names)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "bench-latency.svg")); !bytes.Equal(b, earlier) {
		t.Errorf("a path-only run rewrote the latency plot:\n%s", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("the plot directory holds %d files, want 3 (no temporary files left)", len(entries))
	}

	empty := t.TempDir()
	if files, err := writePlots(&results{}, empty); err != nil || len(files) != 0 {
		t.Errorf("a run with neither scenario drew %v, %v", files, err)
	}
}

// TestPlotsAreTheSameForTheSameResults: drawing the same results twice
// writes the same bytes.
func TestPlotsAreTheSameForTheSameResults(t *testing.T) {
	r := chargeResults()
	r.Path = pathResults().Path
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if _, err := writePlots(r, dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range plotSpecs {
		x, _ := os.ReadFile(filepath.Join(a, s.file))
		y, _ := os.ReadFile(filepath.Join(b, s.file))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two draws of the same results (%d and %d bytes)", s.file, len(x), len(y))
		}
	}
}

// TestResultsSectionLinksTheDrawnPlots: the results section shows an image
// link, relative to the doc, for each plot drawn in the run and no other.
func TestResultsSectionLinksTheDrawnPlots(t *testing.T) {
	docs := t.TempDir()
	r := pathResults()
	r.Opts.doc = filepath.Join(docs, "BENCHMARKS.md")
	var err error
	if r.Plots, err = writePlots(r, filepath.Join(docs, "img")); err != nil {
		t.Fatal(err)
	}
	md := r.markdown()
	for _, link := range []string{"](img/bench-cpu.svg)", "](img/bench-path-p99.svg)"} {
		if strings.Count(md, link) != 1 {
			t.Errorf("the results section does not link %s once:\n%s", link, md)
		}
	}
	if strings.Contains(md, "bench-latency.svg") {
		t.Errorf("the results section links the latency plot, not drawn in a path-only run:\n%s", md)
	}
	if strings.Contains(md, docEnd) {
		t.Error("the results section holds the end marker")
	}

	r.Plots = nil
	if md := r.markdown(); strings.Contains(md, "![") || strings.Contains(md, "### Plots") {
		t.Errorf("the results section of a run without plots shows some:\n%s", md)
	}
}

// TestPlotsFlag: the plots go beside the doc unless -plots says otherwise,
// and nowhere without a doc.
func TestPlotsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, filepath.Join("docs", "img")},
		{[]string{"-doc", "x/y/B.md"}, filepath.Join("x", "y", "img")},
		{[]string{"-doc", ""}, ""},
		{[]string{"-plots", ""}, ""},
		{[]string{"-doc", "", "-plots", "/tmp/p"}, "/tmp/p"},
	} {
		o, err := parseOptions(tc.args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.plots != tc.want {
			t.Errorf("%q: plots %q, want %q", tc.args, o.plots, tc.want)
		}
	}
}

// TestLogTicks labels 1, 2 and 5 of each decade within a narrow range,
// fewer as the range widens.
func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0.7, 60, []string{"1", "2", "5", "10", "20", "50"}},
		{0.7, 600, []string{"1", "3", "10", "30", "100", "300"}},
		{0.05, 2000, []string{"0.1", "1", "10", "100", "1000"}},
	} {
		var labels []string
		for _, tk := range (logTicks{}).Ticks(tc.lo, tc.hi) {
			if !tk.IsMinor() {
				labels = append(labels, tk.Label)
			}
		}
		if !slices.Equal(labels, tc.want) {
			t.Errorf("Ticks(%v, %v) labels %v, want %v", tc.lo, tc.hi, labels, tc.want)
		}
	}
}
