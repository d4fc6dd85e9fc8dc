package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/ledger"
)

// dailyStore is a ledger.Store whose Daily is DailyFn; nothing else is
// called.
type dailyStore struct {
	ledger.Store
	DailyFn func(since, until time.Time) []ledger.Day
}

func (s dailyStore) Daily(_ context.Context, _ string, since, until time.Time) ([]ledger.Day, error) {
	return s.DailyFn(since, until), nil
}

// Daily asks the store for the last n UTC days, today included, and gives
// each currency every day of them, oldest first (zero when nothing was
// booked), with the window's total; by currency.
func TestServiceDaily(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 30, 0, 0, time.UTC)
	day := func(n int) time.Time { return time.Date(2026, 11, 28+n, 0, 0, 0, 0, time.UTC) }
	var asked [2]time.Time
	store := dailyStore{DailyFn: func(since, until time.Time) []ledger.Day {
		asked = [2]time.Time{since, until}
		return []ledger.Day{
			{Day: day(0), Currency: "USD", Captures: 2, Gross: 3000, Fees: 147, Net: 2853},
			{Day: day(-2), Currency: "USD", Returned: 500},
			{Day: day(-2), Currency: "EUR", Captures: 1, Gross: 1000, Fees: 59, Net: 941, FeesLater: 1},
		}
	}}
	s := ledger.NewService(store, nil, nil, func() time.Time { return now }, 0, nil)
	got, err := s.Daily(context.Background(), "mer_x", 3)
	if err != nil {
		t.Fatal(err)
	}
	if asked != [2]time.Time{day(-2), day(1)} {
		t.Errorf("asked the store for %v, want [%s, %s)", asked, day(-2), day(1))
	}
	empty := func(n int, cur string) ledger.Day { return ledger.Day{Day: day(n), Currency: cur} }
	want := []ledger.Series{
		{Currency: "EUR", Days: []ledger.Day{{Day: day(-2), Currency: "EUR", Captures: 1, Gross: 1000, Fees: 59, Net: 941, FeesLater: 1},
			empty(-1, "EUR"), empty(0, "EUR")},
			Total: ledger.Day{Day: day(-2), Currency: "EUR", Captures: 1, Gross: 1000, Fees: 59, Net: 941, FeesLater: 1}},
		{Currency: "USD", Days: []ledger.Day{{Day: day(-2), Currency: "USD", Returned: 500}, empty(-1, "USD"),
			{Day: day(0), Currency: "USD", Captures: 2, Gross: 3000, Fees: 147, Net: 2853}},
			Total: ledger.Day{Day: day(-2), Currency: "USD", Captures: 2, Gross: 3000, Fees: 147, Net: 2853, Returned: 500}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Daily (-want +got):\n%s", diff)
	}
}
