package store_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// bookAt books t as made at `at`: created then, with an id of that moment
// (as a transaction booked then has). Each call must name another moment.
func bookAt(t *testing.T, s *store.Store, tx ledger.Transaction, at time.Time) {
	t.Helper()
	tx.ID, tx.CreatedAt = ids.Floor(ledger.PrefixTransaction, at), at
	if booked, err := s.Book(context.Background(), tx); err != nil || !booked {
		t.Fatalf("book %s at %s: %v, %v", tx.Cause, at, booked, err)
	}
}

// disputeReversed is the transaction of a dispute won: the disputed amount
// comes back to the balance.
func disputeReversed(a ledger.Account, disputeID string, amount int64, at time.Time) ledger.Transaction {
	return ledger.Transaction{ID: ids.New(ledger.PrefixTransaction), MerchantID: a.MerchantID, ConnectorID: a.ConnectorID,
		Currency: a.Currency, Type: ledger.TypeDisputeReversal, Source: disputeID, Cause: "dispute_reversal:" + disputeID,
		Amount: amount, AvailableOn: at, CreatedAt: at,
		Entries: []ledger.Entry{{Account: ledger.AccountProvider, Amount: -amount}, {Account: ledger.AccountBalance, Amount: amount}}}
}

// Daily sums a merchant's balance transactions per UTC day (of created_at)
// and currency over [since, until): the captures' count, gross, fees and
// net, those booked without their fee, and what refunds and disputes took
// back, less disputes won. A refund counts on its own day, never on its
// charge's. Payouts, another merchant's books and the days just outside the
// window are not counted.
func TestLedgerDaily(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	a := newMerchant(t, s, "ada@example.com").ID
	b := newMerchant(t, s, "bob@example.com").ID
	conn := ids.New("conn")
	usd := ledger.Account{MerchantID: a, ConnectorID: conn, Currency: "USD"}
	eur := ledger.Account{MerchantID: a, ConnectorID: conn, Currency: "EUR"}
	until := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	since := until.AddDate(0, 0, -30)
	day := func(n int, h time.Duration) time.Time { return since.AddDate(0, 0, n).Add(h) }
	fees := ledger.DefaultSandboxFees
	capture := func(acc ledger.Account, amount int64, fee ledger.Fee, at time.Time) {
		t.Helper()
		bookAt(t, s, ledger.Captured(acc, ids.NewUUID(), "", amount, fee, at, at.Add(48*time.Hour)), at)
	}

	// The first day of the window, from its first millisecond.
	capture(usd, 2000, fees.For(2000), day(0, 0))            // fee 88
	capture(usd, 1000, fees.For(1000), day(0, 23*time.Hour)) // fee 59
	capture(eur, 5000, fees.For(5000), day(0, 12*time.Hour)) // fee 175
	capture(usd, 700, ledger.Fee{Pending: true}, day(0, 13*time.Hour))
	// A refund and a dispute of the first day's charges, on day 3; the
	// dispute won on day 4.
	bookAt(t, s, ledger.Refunded(usd, ids.NewUUID(), "", 500, day(3, time.Hour)), day(3, time.Hour))
	bookAt(t, s, ledger.DisputeWithdrawn(usd, "dp_1", "", 1000, 1500, 1, day(3, 2*time.Hour)), day(3, 2*time.Hour))
	bookAt(t, s, disputeReversed(usd, "dp_1", 1000, day(4, time.Hour)), day(4, time.Hour))
	// The last day, to its last millisecond, and a payout that day.
	capture(usd, 10, fees.For(10), until.Add(-time.Millisecond)) // fee 30: net -20
	bookAt(t, s, ledger.PaidOut(usd, ids.New(ledger.PrefixPayout), 900, day(29, time.Hour)), day(29, time.Hour))
	// Outside: the millisecond before the window, the first one after.
	capture(usd, 3000, fees.For(3000), since.Add(-time.Millisecond))
	capture(usd, 3000, fees.For(3000), until)
	// Another merchant's, inside.
	capture(ledger.Account{MerchantID: b, ConnectorID: conn, Currency: "USD"}, 4000, fees.For(4000), day(0, time.Hour))

	got, err := s.Daily(ctx, a, since, until)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool {
		return got[i].Currency < got[j].Currency || got[i].Currency == got[j].Currency && got[i].Day.Before(got[j].Day)
	})
	want := []ledger.Day{
		{Day: day(0, 0), Currency: "EUR", Captures: 1, Gross: 5000, Fees: 175, Net: 4825},
		{Day: day(0, 0), Currency: "USD", Captures: 3, Gross: 3700, Fees: 147, Net: 3553, FeesLater: 1},
		{Day: day(3, 0), Currency: "USD", Returned: 1500},
		{Day: day(4, 0), Currency: "USD", Returned: -1000},
		{Day: day(29, 0), Currency: "USD", Captures: 1, Gross: 10, Fees: 30, Net: -20},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Daily (-want +got):\n%s", diff)
	}
	if got, err := s.Daily(ctx, b, since, until); err != nil || len(got) != 1 || got[0].Gross != 4000 {
		t.Errorf("the other merchant's days: %+v, %v", got, err)
	}
}

// The daily sums read the window's transactions of the merchant through
// the primary key, and nothing older: with a year of history (and another
// merchant's), the index scan returns the window's rows and the slack's
// around it, not the merchant's whole history.
func TestLedgerDailyReadsOnlyTheWindow(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	a := newMerchant(t, s, "ada@example.com").ID
	b := newMerchant(t, s, "bob@example.com").ID
	until := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	since := until.AddDate(0, 0, -30)
	// A capture every 15 minutes for 365 days, for each merchant.
	const every = 15 * time.Minute
	start := until.AddDate(0, 0, -365)
	for i, m := range []string{a, b} {
		var txnIDs []string
		var at []time.Time
		for tm := start.Add(time.Duration(i) * time.Millisecond); tm.Before(until); tm = tm.Add(every) {
			txnIDs, at = append(txnIDs, ids.Floor(ledger.PrefixTransaction, tm)), append(at, tm)
		}
		_, err := db.Pool.Exec(ctx, `
INSERT INTO balance_transactions (id, merchant_id, connector_id, currency, type, source, cause, amount, fee, net, available_on,
	created_at, accounts, amounts)
SELECT u.id, $1, 'conn_x', 'USD', 'charge', u.id, 'charge:' || u.id, 1000, 59, 941, u.at, u.at,
	'{provider,fees,balance}', '{-1000,59,941}'
FROM unnest($2::text[], $3::timestamptz[]) AS u (id, at)`, m, txnIDs, at)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE balance_transactions`); err != nil {
		t.Fatal(err)
	}
	days, err := s.Daily(ctx, a, since, until)
	if err != nil {
		t.Fatal(err)
	}
	perDay := int64(24 * time.Hour / every)
	if len(days) != 30 || days[0].Captures != perDay || days[0].Net != perDay*941 {
		t.Fatalf("%d days, the first %+v: want 30 days of %d captures", len(days), days[0], perDay)
	}

	var plan []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	var raw []byte
	query, args := store.DailyQuery(a, since, until)
	if err := db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+query, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	scan, ok := findNode(plan[0].Plan, "balance_transactions")
	if !ok {
		t.Fatalf("no scan of balance_transactions in %s", raw)
	}
	window := int64(30*24*time.Hour/every) + 2*int64(time.Hour/every) // the slack on both sides
	if scan.Index != "balance_transactions_pkey" || scan.Rows > window {
		t.Errorf("the daily sums read balance_transactions by %s %q, %d rows: want the primary key and at most the window's %d rows\n%s",
			scan.Type, scan.Index, scan.Rows, window, raw)
	}
	t.Logf("daily sums of 30 days in a year of history (%d transactions a merchant): %s using %s, %d rows read",
		365*perDay, scan.Type, scan.Index, scan.Rows)
}

// planNode is a node of an EXPLAIN (ANALYZE, FORMAT JSON) plan.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     int64      `json:"Actual Rows"`
	Removed  int64      `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

// tableScan is how the plan reads the table: the node that scans it, the
// index it goes through (a bitmap scan's, from its child) and how many rows
// it read, those its filter removed included.
type tableScan struct {
	Type  string
	Index string
	Rows  int64
}

// findNode finds the plan's scan of the table.
func findNode(raw json.RawMessage, table string) (tableScan, bool) {
	var root planNode
	if err := json.Unmarshal(raw, &root); err != nil {
		return tableScan{}, false
	}
	var walk func(n planNode) (tableScan, bool)
	walk = func(n planNode) (tableScan, bool) {
		if n.Relation == table {
			scan := tableScan{Type: n.Type, Index: n.Index, Rows: n.Rows + n.Removed}
			for _, c := range n.Plans {
				if c.Type == "Bitmap Index Scan" {
					scan.Index, scan.Rows = c.Index, c.Rows
				}
			}
			return scan, true
		}
		for _, c := range n.Plans {
			if f, ok := walk(c); ok {
				return f, true
			}
		}
		return tableScan{}, false
	}
	return walk(root)
}
