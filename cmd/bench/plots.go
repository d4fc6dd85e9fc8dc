package main

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The harness draws what a run measured as SVG plots (gonum/plot, its vgsvg
// backend) into -plots, next to the tables it writes: each plot from the
// scenario that feeds it, and only when that scenario ran, so a run of some
// scenarios leaves the other plots as an earlier run drew them. The fonts
// are named, not embedded, and nothing but the data goes into a file: the
// same results draw the same bytes.

// errNoData is returned by a plot whose scenario has no steps in the run.
var errNoData = errors.New("no steps to plot")

// plotWidth and plotHeight are every plot's size.
const (
	plotWidth  = 7 * vg.Inch
	plotHeight = 5 * vg.Inch
	legendFont = 11 // points
)

// plotFile is a plot the harness drew in this run, for the results section.
type plotFile struct {
	Path    string // the SVG file
	Alt     string // the image's alternative text
	Caption string // one line: what the plot shows
}

// plotSpec is one of the harness's plots: its file name, its texts for the
// results section and how it is drawn from a run's results.
type plotSpec struct {
	file    string
	alt     string
	caption func(r *results) string
	draw    func(r *results) (*plot.Plot, error)
}

// plotSpecs are the harness's plots, in the order the results section shows
// them.
var plotSpecs = []plotSpec{
	{
		file: "bench-latency.svg",
		alt:  "POST /v1/charges p50 and p99 against offered rate, project and floor",
		caption: func(r *results) string {
			return "Charge latency against offered rate: p50 and p99 of every open-model charge step (fixed-rate, half-peak and search), " +
				"project beside floor, log scale; the horizontal line is the p99 target (" + msLabel(r.Opts.slo) + ")."
		},
		draw: (*results).latencyPlot,
	},
	{
		file: "bench-cpu.svg",
		alt:  "CPU per charge by process at each rate of the whole path",
		caption: func(*results) string {
			return "CPU per charge of the whole path at each step's rate (events/s), stacked by process: the API, the worker, Postgres and Redis."
		},
		draw: (*results).pathCPUPlot,
	},
	{
		file: "bench-path-p99.svg",
		alt:  "The whole path's first-attempt p50 and p99 against rate",
		caption: func(*results) string {
			return "The whole path's commit-to-first-attempt p50 and p99 against events/s, log scale; the horizontal line is the " +
				msLabel(pathSLO) + " p99 under which a step holds."
		},
		draw: (*results).pathLatencyPlot,
	},
}

// writePlots draws each plot whose scenario ran into dir and returns those it
// wrote. A plot that fails to draw is left out and its error returned with
// the others' files.
func writePlots(r *results, dir string) ([]plotFile, error) {
	var out []plotFile
	var errs []error
	for _, s := range plotSpecs {
		p, err := s.draw(r)
		if errors.Is(err, errNoData) {
			continue
		}
		path := filepath.Join(dir, s.file)
		if err == nil {
			err = writeSVG(p, path)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.file, err))
			continue
		}
		out = append(out, plotFile{Path: path, Alt: s.alt, Caption: s.caption(r)})
	}
	return out, errors.Join(errs...)
}

// writeSVG draws p on an SVG canvas and replaces path with it, through a
// temporary file in the same directory so a failed draw leaves the old plot.
func writeSVG(p *plot.Plot, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	c := vgsvg.New(plotWidth, plotHeight)
	margin := vg.Points(6)
	p.Draw(draw.Crop(draw.New(c), margin, -margin, margin, -margin))
	f, err := os.CreateTemp(filepath.Dir(path), ".bench-plot-*.svg")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	_, err = c.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// plotsMarkdown shows the plots of this run in the results section, each as
// an image linked relative to the doc and a line saying what it shows.
func (r *results) plotsMarkdown() string {
	if len(r.Plots) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("### Plots\n\nDrawn by the harness from this run's steps (method: *Plots* above).\n")
	for _, p := range r.Plots {
		fmt.Fprintf(&b, "\n![%s](%s)\n\n%s\n", p.Alt, docLink(r.Opts.doc, p.Path), p.Caption)
	}
	return b.String() + "\n"
}

// docLink is file as a Markdown link from the directory of doc: relative,
// with forward slashes, or the path itself when it cannot be made relative.
func docLink(doc, file string) string {
	rel, err := filepath.Rel(filepath.Dir(doc), file)
	if err != nil {
		return filepath.ToSlash(file)
	}
	return filepath.ToSlash(rel)
}

// chargeSeries are the p50 and p99 in ms of target's open-model charge steps
// (fixed, half and search), one point per step, by rate. A step without a
// latency (nothing completed) is left out: the axis is logarithmic.
func (r *results) chargeSeries(target string) (p50, p99 plotter.XYs) {
	var steps []step
	for _, s := range r.Steps {
		if s.Target == target && s.Rate > 0 && (s.Phase == "fixed" || s.Phase == "half" || s.Phase == "search") && s.P50 > 0 && s.P99 > 0 {
			steps = append(steps, s)
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.Rate, b.Rate) })
	for _, s := range steps {
		p50 = append(p50, plotter.XY{X: s.Rate, Y: msOf(s.P50)})
		p99 = append(p99, plotter.XY{X: s.Rate, Y: msOf(s.P99)})
	}
	return p50, p99
}

// latencyPlot is p50 and p99 against offered rate of the charge steps,
// project beside floor, with the p99 target.
func (r *results) latencyPlot() (*plot.Plot, error) {
	p := newPlot("POST /v1/charges, open model: latency against offered rate", "offered rate (charges/s)", "latency (ms, log scale)")
	var all plotter.XYs
	rows := 1 // the legend's: the target and two per server
	for i, target := range []string{"project", "floor"} {
		p50, p99 := r.chargeSeries(target)
		if len(p50) == 0 {
			continue
		}
		rows += 2
		glyph := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}}[i]
		for _, q := range []struct {
			name   string
			xys    plotter.XYs
			dashed bool
		}{{target + " p50", p50, true}, {target + " p99", p99, false}} {
			if err := addSeries(p, q.name, q.xys, seriesColors[i], glyph, q.dashed); err != nil {
				return nil, err
			}
			all = append(all, q.xys...)
		}
	}
	if len(all) == 0 {
		return nil, errNoData
	}
	addTarget(p, "p99 target "+msLabel(r.Opts.slo), msOf(r.Opts.slo))
	logY(p, all, msOf(r.Opts.slo), rows)
	rateX(p, all)
	return p, nil
}

// pathSteps are the path scenario's steps by events/s, search steps among
// the others.
func (r *results) pathSteps() []pathStep {
	if r.Path == nil {
		return nil
	}
	steps := slices.Clone(r.Path.Steps)
	slices.SortStableFunc(steps, func(a, b pathStep) int { return cmp.Compare(a.Events, b.Events) })
	return steps
}

// pathLatencyPlot is the whole path's first-attempt p50 and p99 against
// events/s, with the 250 ms under which a step holds.
func (r *results) pathLatencyPlot() (*plot.Plot, error) {
	var p50, p99 plotter.XYs
	for _, s := range r.pathSteps() {
		if s.Lat.P50 > 0 && s.Lat.P99 > 0 {
			p50 = append(p50, plotter.XY{X: s.Events, Y: msOf(s.Lat.P50)})
			p99 = append(p99, plotter.XY{X: s.Events, Y: msOf(s.Lat.P99)})
		}
	}
	if len(p99) == 0 {
		return nil, errNoData
	}
	p := newPlot("One endpoint, the whole path: commit to first attempt", "events/s (two per charge)", "first attempt (ms, log scale)")
	if err := addSeries(p, "first attempt p50", p50, seriesColors[0], draw.CircleGlyph{}, true); err != nil {
		return nil, err
	}
	if err := addSeries(p, "first attempt p99", p99, seriesColors[0], draw.CircleGlyph{}, false); err != nil {
		return nil, err
	}
	addTarget(p, "p99 target "+msLabel(pathSLO), msOf(pathSLO))
	all := append(slices.Clone(p50), p99...)
	logY(p, all, msOf(pathSLO), 3)
	rateX(p, all)
	return p, nil
}

// pathCPUPlot is the whole path's CPU per charge at each step, one bar per
// step stacked by process.
func (r *results) pathCPUPlot() (*plot.Plot, error) {
	steps := r.pathSteps()
	if len(steps) == 0 {
		return nil, errNoData
	}
	p := newPlot("One endpoint, the whole path: CPU per charge by process", "events/s (two per charge)", "CPU µs per charge")
	width := min(vg.Points(40), 0.6*(plotWidth-vg.Inch)/vg.Length(len(steps)))
	var stack []*plotter.BarChart
	var top float64
	totals := make([]float64, len(steps))
	for i, proc := range pathProcesses {
		vs := make(plotter.Values, len(steps))
		for j, s := range steps {
			vs[j] = proc.of(s).Seconds() * 1e6
			totals[j] += vs[j]
			top = max(top, totals[j])
		}
		bars, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return nil, err
		}
		bars.Color = proc.color
		bars.LineStyle.Width = 0
		if i > 0 {
			bars.StackOn(stack[i-1])
		}
		stack = append(stack, bars)
		p.Add(bars)
	}
	// The legend lists the processes as the bars stack them, top first.
	for i := len(stack) - 1; i >= 0; i-- {
		p.Legend.Add(pathProcesses[i].name, stack[i])
	}
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = rate(s.Events)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(steps))-0.5
	p.Y.Min, p.Y.Max = 0, max(top, 1)/(1-legendShare(len(stack)))
	return p, nil
}

// seriesColors are the lines' colors by server (project, floor); the path
// plot uses the first.
var seriesColors = []color.Color{color.RGBA{R: 31, G: 94, B: 168, A: 255}, color.RGBA{R: 214, G: 104, B: 20, A: 255}}

// pathProcesses are the processes of the path as the CPU plot stacks them,
// bottom first: name, color and CPU per charge in a step.
var pathProcesses = []struct {
	name  string
	color color.Color
	of    func(pathStep) time.Duration
}{
	{"API", color.RGBA{R: 31, G: 94, B: 168, A: 255}, func(s pathStep) time.Duration { return s.API }},
	{"worker", color.RGBA{R: 102, G: 166, B: 30, A: 255}, func(s pathStep) time.Duration { return s.Worker }},
	{"Postgres", color.RGBA{R: 117, G: 112, B: 179, A: 255}, func(s pathStep) time.Duration { return s.PG }},
	{"Redis", color.RGBA{R: 214, G: 64, B: 48, A: 255}, func(s pathStep) time.Duration { return s.Redis }},
}

// targetColor is the color of a target's horizontal line.
var targetColor = color.RGBA{R: 110, G: 110, B: 110, A: 255}

// newPlot is a plot with the harness's title, axis labels, a light grid and
// the legend at the top left.
func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(6), -vg.Points(4)
	p.Legend.Padding = vg.Points(2)
	p.Legend.TextStyle.Font.Size = vg.Points(legendFont)
	return p
}

// legendShare is about the part of a plot's data area that a legend of rows
// entries takes at its top: the data is kept below it.
func legendShare(rows int) float64 {
	row := vg.Points(legendFont*1.2 + 2)
	area := plotHeight - 1.2*vg.Inch // less the title and the x axis
	return min(0.5, float64(vg.Length(rows)*row+vg.Points(8))/float64(area))
}

// addSeries adds xys as a line with a glyph at each point, dashed or solid,
// and its legend entry.
func addSeries(p *plot.Plot, name string, xys plotter.XYs, c color.Color, glyph draw.GlyphDrawer, dashed bool) error {
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	line.Color, line.Width = c, vg.Points(1.5)
	if dashed {
		line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	}
	points.Color, points.Shape, points.Radius = c, glyph, vg.Points(2.5)
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return nil
}

// addTarget draws a horizontal line at y across the plot.
func addTarget(p *plot.Plot, name string, y float64) {
	f := plotter.NewFunction(func(float64) float64 { return y })
	f.Color, f.Width = targetColor, vg.Points(1)
	f.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(f)
	p.Legend.Add(name, f)
}

// logY makes the y axis logarithmic over xys and the target, with room
// above them for a legend of rows entries.
func logY(p *plot.Plot, xys plotter.XYs, target float64, rows int) {
	lo, hi := target, target
	for _, q := range xys {
		lo, hi = min(lo, q.Y), max(hi, q.Y)
	}
	lo, hi = lo/1.5, hi*1.5
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Y.Min, p.Y.Max = lo, lo*math.Pow(hi/lo, 1/(1-legendShare(rows)))
}

// rateX spans the x axis from 0 to a little past the highest rate.
func rateX(p *plot.Plot, xys plotter.XYs) {
	var hi float64
	for _, q := range xys {
		hi = max(hi, q.X)
	}
	p.X.Min, p.X.Max = 0, hi*1.05
}

// logTicks labels 1, 2 and 5 of each decade over up to two decades, 1 and 3
// up to four, powers of ten beyond, with unlabelled ticks at the other
// integers of each decade.
type logTicks struct{}

// Ticks implements plot.Ticker for lo > 0.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	labelled := []int{1, 2, 5}
	switch decades := math.Log10(hi / lo); {
	case decades > 4:
		labelled = []int{1}
	case decades > 2:
		labelled = []int{1, 3}
	}
	var ticks []plot.Tick
	for k := int(math.Floor(math.Log10(lo))); math.Pow10(k) <= hi; k++ {
		for i := 1; i < 10; i++ {
			v := float64(i) * math.Pow10(k)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if slices.Contains(labelled, i) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return d.Seconds() * 1000 }

// msLabel is d as "10 ms".
func msLabel(d time.Duration) string {
	return strconv.FormatFloat(msOf(d), 'f', -1, 64) + " ms"
}
