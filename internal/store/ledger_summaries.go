package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
)

// Summaries of the books for the dashboard (ledger.Service.Accounts,
// Daily, PayoutSettled).

// selectAccounts is selectBalance per connector too: the same index-only
// scan of the merchant's transactions.
const selectAccounts = `SELECT connector_id, currency,
	coalesce(sum(net) FILTER (WHERE available_on <= $2), 0),
	coalesce(sum(net) FILTER (WHERE available_on > $2), 0)
FROM balance_transactions WHERE merchant_id = $1
GROUP BY currency, connector_id`

// Accounts implements ledger.Store.
func (s *Store) Accounts(ctx context.Context, merchantID string, at time.Time) ([]ledger.AccountSum, error) {
	rows, err := s.pool.Query(ctx, selectAccounts, merchantID, at)
	if err != nil {
		return nil, mapErr(err, "balance")
	}
	sums, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.AccountSum, error) {
		var x ledger.AccountSum
		err := r.Scan(&x.ConnectorID, &x.Currency, &x.Available, &x.Pending)
		return x, err
	})
	return sums, mapErr(err, "balance")
}

// selectDaily sums a merchant's ($1) balance transactions created in
// [$4, $5) per UTC day and currency. They are found through the primary
// key, (merchant_id, id): ids are time-ordered, made as the transaction is
// booked, so those created in the window have ids in [$2, $3), the least
// ids of moments a little before and after it (dailySlack); created_at
// then draws the exact line. The scan reads the window's transactions of
// the merchant and nothing older, however long its history.
const selectDaily = `SELECT (created_at AT TIME ZONE 'UTC')::date, currency,
	count(*) FILTER (WHERE type = 'charge'),
	coalesce(sum(amount) FILTER (WHERE type = 'charge'), 0),
	coalesce(sum(fee) FILTER (WHERE type = 'charge'), 0),
	coalesce(sum(net) FILTER (WHERE type = 'charge'), 0),
	count(*) FILTER (WHERE type = 'charge' AND fee_pending),
	coalesce(-sum(amount) FILTER (WHERE type IN ('refund', 'dispute', 'dispute_reversal')), 0)
FROM balance_transactions
WHERE merchant_id = $1 AND id >= $2 AND id < $3 AND created_at >= $4 AND created_at < $5
	AND type IN ('charge', 'refund', 'dispute', 'dispute_reversal')
GROUP BY 1, 2`

// dailySlack is how far the id range of selectDaily reaches beyond its
// window: a transaction's id is made a moment after its created_at (the
// capture's time, stamped when the provider answered), never this far.
const dailySlack = time.Hour

// Daily implements ledger.Store.
func (s *Store) Daily(ctx context.Context, merchantID string, since, until time.Time) ([]ledger.Day, error) {
	rows, err := s.pool.Query(ctx, selectDaily, merchantID, ids.Floor(ledger.PrefixTransaction, since.Add(-dailySlack)),
		ids.Floor(ledger.PrefixTransaction, until.Add(dailySlack)), since, until)
	if err != nil {
		return nil, mapErr(err, "balance transaction")
	}
	days, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Day, error) {
		var d ledger.Day
		err := r.Scan(&d.Day, &d.Currency, &d.Captures, &d.Gross, &d.Fees, &d.Net, &d.FeesLater, &d.Returned)
		d.Day = time.Date(d.Day.Year(), d.Day.Month(), d.Day.Day(), 0, 0, 0, 0, time.UTC)
		return d, err
	})
	return days, mapErr(err, "balance transaction")
}

// selectSettled sums what an automatic payout paid out, as
// ListTransactions with its payout filter lists it: not the payout's own
// transaction.
const selectSettled = `SELECT count(*), coalesce(sum(t.net), 0)
FROM payout_settlements p JOIN balance_transactions t ON t.merchant_id = p.merchant_id AND t.id = p.txn_id
WHERE p.payout_id = $2 AND p.merchant_id = $1 AND t.source <> $2`

// PayoutSettled implements ledger.Store.
func (s *Store) PayoutSettled(ctx context.Context, merchantID, payoutID string) (ledger.Settled, error) {
	var x ledger.Settled
	err := s.pool.QueryRow(ctx, selectSettled, merchantID, payoutID).Scan(&x.Count, &x.Net)
	return x, mapErr(err, "payout")
}
