package ledger

import (
	"context"
	"sort"
	"time"
)

// Summaries of the books for people (the dashboard): each account's
// balance, the captures of each day, and what a payout paid out.

// AccountSum is the balance of one account: a connector's, in one
// currency.
type AccountSum struct {
	ConnectorID string
	Currency    string
	Available   int64
	Pending     int64
}

// Day is one UTC day of a merchant's books in one currency: the charges
// captured that day (their gross, the fees booked with them and their net,
// gross - fees) and what went back to cardholders that day (refunds and
// disputes, less disputes won). A refund or a dispute never changes the
// day its charge was captured: it is a transaction of its own, on its own
// day.
type Day struct {
	// Day is the day's midnight, UTC.
	Day      time.Time
	Currency string
	// Captures is how many capture transactions were booked.
	Captures int64
	Gross    int64
	Fees     int64
	Net      int64
	// FeesLater is how many of the captures were booked without their
	// fee, which their provider reports later (with settlement): it is
	// booked then, as an adjustment, and is not in Fees.
	FeesLater int64
	// Returned is what refunds and disputes took back that day, less what
	// disputes won brought back: positive when money left the balance.
	Returned int64
}

// Add adds d's sums to s (its Day and Currency stay s's).
func (s *Day) Add(d Day) {
	s.Captures += d.Captures
	s.Gross += d.Gross
	s.Fees += d.Fees
	s.Net += d.Net
	s.FeesLater += d.FeesLater
	s.Returned += d.Returned
}

// Series is one currency's days, every day of a window, oldest first (a day
// without bookings has zero sums), and their total.
type Series struct {
	Currency string
	Days     []Day
	Total    Day
}

// ChartDays is how many days the dashboard's daily chart covers.
const ChartDays = 30

// Accounts returns the balance of each of the merchant's accounts, by
// currency and then connector.
func (s *Service) Accounts(ctx context.Context, merchantID string) ([]AccountSum, error) {
	sums, err := s.store.Accounts(ctx, merchantID, s.now())
	if err != nil {
		return nil, err
	}
	sort.Slice(sums, func(i, j int) bool {
		if sums[i].Currency != sums[j].Currency {
			return sums[i].Currency < sums[j].Currency
		}
		return sums[i].ConnectorID < sums[j].ConnectorID
	})
	return sums, nil
}

// Daily returns the merchant's last days UTC days, today included, per
// currency that has a booking in them, by currency.
func (s *Service) Daily(ctx context.Context, merchantID string, days int) ([]Series, error) {
	until := s.now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	since := until.AddDate(0, 0, -days)
	rows, err := s.store.Daily(ctx, merchantID, since, until)
	if err != nil {
		return nil, err
	}
	byCurrency := map[string]*Series{}
	var out []*Series
	for _, r := range rows {
		i := int(r.Day.UTC().Sub(since) / (24 * time.Hour))
		if i < 0 || i >= days {
			continue
		}
		sr, ok := byCurrency[r.Currency]
		if !ok {
			sr = &Series{Currency: r.Currency, Days: make([]Day, days), Total: Day{Day: since, Currency: r.Currency}}
			for j := range sr.Days {
				sr.Days[j] = Day{Day: since.AddDate(0, 0, j), Currency: r.Currency}
			}
			byCurrency[r.Currency] = sr
			out = append(out, sr)
		}
		sr.Days[i].Add(r)
		sr.Total.Add(r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Currency < out[j].Currency })
	series := make([]Series, len(out))
	for i, sr := range out {
		series[i] = *sr
	}
	return series, nil
}

// Settled is what an automatic payout paid out: how many balance
// transactions, and the sum of their net, which is the payout's amount.
type Settled struct {
	Count int64
	Net   int64
}

// PayoutSettled returns what the payout paid out (nothing for a payout
// made by hand, which settles no transaction of its own).
func (s *Service) PayoutSettled(ctx context.Context, merchantID, payoutID string) (Settled, error) {
	return s.store.PayoutSettled(ctx, merchantID, payoutID)
}
