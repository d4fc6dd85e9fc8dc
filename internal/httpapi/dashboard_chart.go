package httpapi

import (
	"math"
	"strconv"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/money"
)

// The Balance page's chart: one currency's daily gross, fees and net as
// grouped bars, drawn by the server as inline SVG (no script, no library).
// The page lays out the numbers computed here; each day's group carries a
// <title> (its tooltip), and the page's table has the same numbers.

// Chart geometry, in the SVG's own units (it scales to the page's width).
const (
	chartWidth  = 960.0
	chartHeight = 280.0
	chartLeft   = 78.0 // room for the amounts of the y axis
	chartRight  = 12.0
	chartTop    = 14.0
	chartBottom = 30.0 // room for the dates of the x axis
	// chartTicks is about how many steps the y axis is cut into.
	chartTicks = 4
)

// Kinds of bars, in their order within a day's group.
var chartKinds = []string{"gross", "fees", "net"}

type chart struct {
	Currency string
	Width    float64
	Height   float64
	// PlotLeft, PlotTop, PlotWidth, PlotHeight: the area of the bars.
	PlotLeft, PlotTop, PlotWidth, PlotHeight float64
	// Slot is a day's width; Zero the y of amount 0.
	Slot float64
	Zero float64
	// Top and Bottom are the amounts (minor units) at the plot's top and
	// bottom edges.
	Top, Bottom int64
	Ticks       []chartTick
	Labels      []chartLabel
	Days        []chartDay
	Series      ledger.Series
	// Through is the last day's date.
	Through string
	// Empty: nothing was captured, refunded or disputed in the window.
	Empty bool
}

type chartTick struct {
	Y     float64
	Label string
}

type chartLabel struct {
	X     float64
	Label string
}

type chartDay struct {
	Day  ledger.Day
	Date string
	X    float64
	Bars []chartBar
	Tip  string
}

type chartBar struct {
	Kind   string
	Amount int64
	X, Y   float64
	W, H   float64
}

// newChart lays out a series: bars from the zero line up (or down, for a
// negative net: a capture smaller than its fixed fee) on a y axis cut in
// round steps.
func newChart(s ledger.Series) chart {
	ch := chart{Currency: s.Currency, Width: chartWidth, Height: chartHeight, PlotLeft: chartLeft, PlotTop: chartTop,
		PlotWidth: chartWidth - chartLeft - chartRight, PlotHeight: chartHeight - chartTop - chartBottom, Series: s,
		Empty: s.Total.Captures == 0 && s.Total.Returned == 0}
	var lo, hi int64
	for _, d := range s.Days {
		for _, v := range []int64{d.Gross, d.Fees, d.Net} {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	step := niceStep((hi - lo + chartTicks - 1) / chartTicks)
	if hi == lo {
		// Nothing to draw: an axis of a few major units.
		step = int64(math.Pow10(money.Digits(s.Currency)))
		hi = chartTicks * step
	}
	ch.Top, ch.Bottom = ceilTo(hi, step), -ceilTo(-lo, step)
	y := func(v int64) float64 {
		return ch.PlotTop + float64(ch.Top-v)*ch.PlotHeight/float64(ch.Top-ch.Bottom)
	}
	ch.Zero = y(0)
	for v := ch.Bottom; v <= ch.Top; v += step {
		ch.Ticks = append(ch.Ticks, chartTick{Y: y(v), Label: money.Major(v, s.Currency)})
	}
	n := len(s.Days)
	if n == 0 {
		return ch
	}
	ch.Through = s.Days[n-1].Day.Format(time.DateOnly)
	ch.Slot = ch.PlotWidth / float64(n)
	barW := ch.Slot * 0.24
	gap := ch.Slot * 0.04
	group := 3*barW + 2*gap
	for i, d := range s.Days {
		x := ch.PlotLeft + float64(i)*ch.Slot
		cd := chartDay{Day: d, Date: d.Day.Format(time.DateOnly), X: x, Tip: dayTip(d)}
		for k, amount := range []int64{d.Gross, d.Fees, d.Net} {
			if amount == 0 {
				continue
			}
			top, bottom := y(max(amount, 0)), y(min(amount, 0))
			cd.Bars = append(cd.Bars, chartBar{Kind: chartKinds[k], Amount: amount,
				X: x + (ch.Slot-group)/2 + float64(k)*(barW+gap), Y: top, W: barW, H: max(bottom-top, 1)})
		}
		ch.Days = append(ch.Days, cd)
		// A date under every fifth day, counted back from the last (today).
		if (n-1-i)%5 == 0 {
			ch.Labels = append(ch.Labels, chartLabel{X: x + ch.Slot/2, Label: d.Day.Format("Jan 2")})
		}
	}
	return ch
}

// dayTip is a day's tooltip: its date and its numbers.
func dayTip(d ledger.Day) string {
	f := func(v int64) string { return money.Format(v, d.Currency) }
	tip := d.Day.Format("Mon 2 Jan 2006") + ": "
	switch d.Captures {
	case 0:
		tip += "no captures"
	case 1:
		tip += "1 capture"
	default:
		tip += strconv.FormatInt(d.Captures, 10) + " captures"
	}
	if d.Captures > 0 {
		tip += ", gross " + f(d.Gross) + ", fees " + f(d.Fees) + ", net " + f(d.Net)
	}
	if d.Returned != 0 {
		tip += "; refunds and disputes " + f(d.Returned)
	}
	return tip
}

// niceStep is the least of 1, 2 and 5 times a power of ten that is at
// least x (and at least 1).
func niceStep(x int64) int64 {
	p := int64(1)
	for p*10 <= x {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// ceilTo rounds v >= 0 up to a multiple of step (0 for v <= 0).
func ceilTo(v, step int64) int64 {
	if v <= 0 {
		return 0
	}
	return (v + step - 1) / step * step
}
