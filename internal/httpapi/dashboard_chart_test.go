package httpapi

import (
	"math"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/ledger"
)

func TestNiceStep(t *testing.T) {
	for x, want := range map[int64]int64{0: 1, 1: 1, 2: 2, 3: 5, 7: 10, 10: 10, 11: 20, 1250: 2000, 2001: 5000, 5001: 10000, 99_999: 100_000} {
		if got := niceStep(x); got != want {
			t.Errorf("niceStep(%d) = %d, want %d", x, got, want)
		}
	}
}

// A negative net (a capture smaller than its fixed fee) hangs below the
// zero line, which moves up to make room; every bar keeps one scale, and
// the axis is cut in round steps that cover every amount.
func TestChartNegativeNet(t *testing.T) {
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s := ledger.Series{Currency: "USD", Days: []ledger.Day{
		{Day: day, Currency: "USD", Captures: 1, Gross: 10, Fees: 30, Net: -20},
		{Day: day.AddDate(0, 0, 1), Currency: "USD", Captures: 1, Gross: 100, Fees: 33, Net: 67},
		{Day: day.AddDate(0, 0, 2), Currency: "USD"},
	}}
	s.Total = ledger.Day{Captures: 2}
	ch := newChart(s)
	// From -0.20 to 1.00: a quarter of the span is 0.30, rounded up to 0.50.
	if ch.Top != 100 || ch.Bottom != -50 || ch.Through != "2026-11-03" || ch.Empty {
		t.Fatalf("axis %d to %d, through %s, empty %v: want -50 to 100 (steps of 50) through 2026-11-03", ch.Bottom, ch.Top, ch.Through, ch.Empty)
	}
	if len(ch.Ticks) != 4 || ch.Ticks[0].Label != "-0.50" || ch.Ticks[1].Label != "0.00" || ch.Ticks[3].Label != "1.00" ||
		ch.Ticks[1].Y != ch.Zero {
		t.Errorf("ticks %+v, zero at %f", ch.Ticks, ch.Zero)
	}
	perUnit := ch.PlotHeight / 150
	for _, d := range ch.Days {
		for _, b := range d.Bars {
			h := math.Abs(float64(b.Amount)) * perUnit
			if math.Abs(b.H-h) > 1e-9 {
				t.Errorf("%s %s %d: height %f, want %f", d.Date, b.Kind, b.Amount, b.H, h)
			}
			if b.Amount > 0 && math.Abs(b.Y+b.H-ch.Zero) > 1e-9 || b.Amount < 0 && math.Abs(b.Y-ch.Zero) > 1e-9 {
				t.Errorf("%s %s %d: from %f to %f, want it to start at the zero line %f", d.Date, b.Kind, b.Amount, b.Y, b.Y+b.H, ch.Zero)
			}
		}
	}
	if n := len(ch.Days[2].Bars); n != 0 {
		t.Errorf("a day without captures has %d bars", n)
	}
}

// A window without bookings still has an axis: a few major units of its
// currency, and no bars.
func TestChartEmpty(t *testing.T) {
	for currency, top := range map[string]int64{"USD": 400, "JPY": 4, "KWD": 4000} {
		ch := newChart(ledger.Series{Currency: currency, Days: make([]ledger.Day, 30)})
		if !ch.Empty || ch.Top != top || ch.Bottom != 0 || len(ch.Ticks) != 5 || ch.Ticks[4].Label != "4"+map[string]string{"USD": ".00", "JPY": "", "KWD": ".000"}[currency] {
			t.Errorf("%s: empty %v, axis %d to %d, ticks %+v", currency, ch.Empty, ch.Bottom, ch.Top, ch.Ticks)
		}
		for _, d := range ch.Days {
			if len(d.Bars) != 0 {
				t.Errorf("%s: an empty day has bars", currency)
			}
		}
	}
}
