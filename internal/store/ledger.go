package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// The books (docs/ledger.md): each ledger transaction is one row of
// balance_transactions, its entries in two arrays of the row; migration
// 00023's CHECK ledger_balanced refuses a row whose entries do not balance,
// and its triggers any update or delete.

// bookingArgs is the number of arguments bookCTE takes.
const bookingArgs = 16

// bookCTE returns a CTE named name that writes a ledger transaction from the
// arguments $first to $first+15 (bookingValues) once per row of gate (a
// relation of the statement, or "" for one row), unless its cause was
// booked before: then it writes nothing.
func bookCTE(name string, first int, gate string) string {
	a := func(i int) string { return "$" + strconv.Itoa(first+i) }
	from := ""
	if gate != "" {
		from = " FROM " + gate
	}
	return name + ` AS (
	INSERT INTO balance_transactions (id, merchant_id, connector_id, currency, type, source, cause, amount, fee, net,
		fee_details, fee_pending, provider_reference, available_on, created_at, accounts, amounts)
	SELECT ` + a(0) + `::text, ` + a(1) + `::text, ` + a(2) + `::text, ` + a(3) + `::text, ` + a(4) + `::text, ` + a(5) + `::text, ` +
		a(6) + `::text, ` + a(7) + `::bigint, ` + a(8) + `::bigint, ` + a(7) + `::bigint - ` + a(8) + `::bigint, ` + a(9) + `::jsonb, ` +
		a(10) + `::bool, ` + a(11) + `::text, ` + a(12) + `::timestamptz, ` + a(13) + `::timestamptz, ` + a(14) + `::text[], ` +
		a(15) + `::bigint[]` + from + `
	WHERE ` + a(0) + `::text IS NOT NULL
	ON CONFLICT (merchant_id, cause) DO NOTHING
	RETURNING id
)`
}

// bookingValues are bookCTE's arguments for t; all NULL for nil (nothing to
// book).
func bookingValues(t *ledger.Transaction) []any {
	if t == nil {
		return make([]any, bookingArgs)
	}
	accounts := make([]string, len(t.Entries))
	amounts := make([]int64, len(t.Entries))
	for i, e := range t.Entries {
		accounts[i], amounts[i] = e.Account, e.Amount
	}
	details := t.FeeDetails
	if details == nil {
		details = []ledger.FeeDetail{}
	}
	fd, _ := json.Marshal(details) // plain fields: cannot fail
	var ref *string
	if t.ProviderReference != "" {
		ref = &t.ProviderReference
	}
	return []any{t.ID, t.MerchantID, t.ConnectorID, t.Currency, t.Type, t.Source, bookingCause(t.Cause), t.Amount, t.Fee, fd,
		t.FeePending, ref, t.AvailableOn, t.CreatedAt, accounts, amounts}
}

// bookingCause is the key a booking is written under: its cause. (A test
// replaces it to show that the key is what keeps a repeated change from
// booking twice.)
var bookingCause = func(cause string) string { return cause }

// book writes t in tx; false when its cause was booked before.
func book(ctx context.Context, tx pgx.Tx, t ledger.Transaction) (bool, error) {
	if err := t.Check(); err != nil {
		return false, err
	}
	var n int
	err := tx.QueryRow(ctx, `WITH `+bookCTE("bk", 1, "")+` SELECT count(*) FROM bk`, bookingValues(&t)...).Scan(&n)
	return n == 1, mapErr(err, "balance transaction")
}

// Book writes a transaction that no state change of the gateway's carries
// (what a provider reports on its own: a dispute's withdrawal, an imported
// payout); false when its cause was booked before.
func (s *Store) Book(ctx context.Context, t ledger.Transaction) (bool, error) {
	booked := false
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		booked, err = book(ctx, tx, t)
		return err
	})
	return booked, err
}

const txnColumns = `id, merchant_id, connector_id, currency, type, source, cause, amount, fee, fee_details, fee_pending,
coalesce(provider_reference, ''), available_on, created_at`

func scanTxn(row pgx.Row) (ledger.Transaction, error) { return scanTxnWith(row) }

// scanTxnWith scans txnColumns, then the columns after them into extra.
func scanTxnWith(row pgx.Row, extra ...any) (ledger.Transaction, error) {
	var t ledger.Transaction
	var fd []byte
	err := row.Scan(append([]any{&t.ID, &t.MerchantID, &t.ConnectorID, &t.Currency, &t.Type, &t.Source, &t.Cause, &t.Amount, &t.Fee, &fd,
		&t.FeePending, &t.ProviderReference, &t.AvailableOn, &t.CreatedAt}, extra...)...)
	if err == nil {
		err = json.Unmarshal(fd, &t.FeeDetails)
	}
	return t, err
}

// The balance is the net of the merchant's transactions, what each moved in
// its balance account, read through balance_transactions_balance_idx alone.
const selectBalance = `SELECT currency,
	coalesce(sum(net) FILTER (WHERE available_on <= $2), 0),
	coalesce(sum(net) FILTER (WHERE available_on > $2), 0)
FROM balance_transactions WHERE merchant_id = $1 AND ($3 = '' OR connector_id = $3)
GROUP BY currency`

// Balance implements ledger.Store.
func (s *Store) Balance(ctx context.Context, merchantID, connectorID string, at time.Time) ([]ledger.Sum, error) {
	rows, err := s.pool.Query(ctx, selectBalance, merchantID, at, connectorID)
	if err != nil {
		return nil, mapErr(err, "balance")
	}
	sums, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Sum, error) {
		var x ledger.Sum
		err := r.Scan(&x.Currency, &x.Available, &x.Pending)
		return x, err
	})
	return sums, mapErr(err, "balance")
}

// ListTransactions implements ledger.Store.
func (s *Store) ListTransactions(ctx context.Context, merchantID string, f ledger.Filter, p listing.Params) (listing.Page[ledger.Transaction], error) {
	query := `SELECT ` + txnColumns + ` FROM balance_transactions WHERE merchant_id = $1`
	args := []any{merchantID}
	add := func(cond string, v any) {
		args = append(args, v)
		query += ` AND ` + strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args)))
	}
	if f.Type != "" {
		add(`type = $?`, f.Type)
	}
	if f.Source != "" {
		add(`source = $?`, f.Source)
	}
	if f.ConnectorID != "" {
		add(`connector_id = $?`, f.ConnectorID)
	}
	if f.CreatedGTE != nil {
		add(`created_at >= $?`, *f.CreatedGTE)
	}
	if f.CreatedLTE != nil {
		add(`created_at <= $?`, *f.CreatedLTE)
	}
	if f.PayoutID != "" {
		// What the payout paid out: not the payout's own transaction.
		add(`id IN (SELECT txn_id FROM payout_settlements WHERE merchant_id = $1 AND payout_id = $?) AND source <> $?`, f.PayoutID)
	}
	return listPage(ctx, s, query, args, p, scanTxn, "balance transaction")
}

// TransactionByID implements ledger.Store.
func (s *Store) TransactionByID(ctx context.Context, merchantID, id string) (ledger.Transaction, error) {
	t, err := scanTxn(s.pool.QueryRow(ctx, `SELECT `+txnColumns+` FROM balance_transactions WHERE merchant_id = $1 AND id = $2`, merchantID, id))
	return t, mapErr(err, "balance transaction")
}

const payoutColumns = `id, merchant_id, environment, connector_id, currency, amount, status, automatic, description,
failure_code, failure_message, arrival_date, created_at, updated_at, provider_reference`

func scanPayout(row pgx.Row) (ledger.Payout, error) {
	var p ledger.Payout
	err := row.Scan(&p.ID, &p.MerchantID, &p.Environment, &p.ConnectorID, &p.Currency, &p.Amount, &p.Status, &p.Automatic,
		&p.Description, &p.FailureCode, &p.FailureMessage, &p.ArrivalDate, &p.CreatedAt, &p.UpdatedAt, &p.ProviderReference)
	return p, err
}

const (
	// lockAccount serialises the payouts of one account, from the read of
	// its balance to the commit.
	lockAccount      = `SELECT pg_advisory_xact_lock(hashtextextended('ledger:' || $1 || ':' || $2 || ':' || $3, 0))`
	availableBalance = `SELECT coalesce(sum(net), 0) FROM balance_transactions
WHERE merchant_id = $1 AND currency = $3 AND connector_id = $2 AND available_on <= $4`
	insertPayout = `INSERT INTO payouts (` + payoutColumns + `, schedule_slot) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (connector_id, provider_reference) WHERE provider_reference IS NOT NULL DO NOTHING`
	// insertPayoutEvent writes an event of payout $7 (its uuid $8), numbered
	// by the payout's counter, and its deliveries. Payout events have no
	// charge: the nil UUID keeps them out of the backfill of old events.
	insertPayoutEvent = `
WITH seq AS (
	UPDATE payouts SET event_seq = event_seq + 1 WHERE id = $7 RETURNING event_seq
), ev AS (
	INSERT INTO events (id, merchant_id, environment, type, body, created_at, charge_id, object_id, sequence)
	SELECT $1, $2, $3, $4, $5, $6, '00000000-0000-0000-0000-000000000000', $8::uuid, seq.event_seq FROM seq
	RETURNING ` + eventReturning + `
)` + fanout + `
SELECT ` + deliveriesOf
)

func (s *Store) writePayoutEvent(ctx context.Context, tx pgx.Tx, payoutID string, e events.Event) ([]outbox.Task, error) {
	u, ok := ids.UUIDOf(ledger.PrefixPayout, payoutID)
	if !ok {
		return nil, fmt.Errorf("store: %q is not a payout id", payoutID)
	}
	var evs []string
	if err := tx.QueryRow(ctx, insertPayoutEvent, e.ID, e.MerchantID, e.Environment, e.Type, e.Body, e.CreatedAt, payoutID, u).Scan(&evs); err != nil {
		return nil, mapErr(err, "event")
	}
	return deliveryTasks(evs), nil
}

// writePayout inserts a planned payout, its transaction and its event.
func (s *Store) writePayout(ctx context.Context, tx pgx.Tx, plan ledger.PayoutPlan, slot *time.Time) ([]outbox.Task, error) {
	po := plan.Payout
	tag, err := tx.Exec(ctx, insertPayout, po.ID, po.MerchantID, po.Environment, po.ConnectorID, po.Currency, po.Amount,
		po.Status, po.Automatic, po.Description, po.FailureCode, po.FailureMessage, po.ArrivalDate, po.CreatedAt, po.UpdatedAt,
		po.ProviderReference, slot)
	if err != nil {
		return nil, mapErr(err, "payout")
	}
	if tag.RowsAffected() == 0 {
		return nil, errImported
	}
	booked, err := book(ctx, tx, plan.Transaction)
	if err != nil {
		return nil, err
	}
	if !booked {
		return nil, fmt.Errorf("store: payout %s was booked before it was made", po.ID)
	}
	return s.writePayoutEvent(ctx, tx, po.ID, plan.Event)
}

// errImported: the provider's payout was imported before.
var errImported = errors.New("store: the payout was imported before")

// PayoutByReference implements ledger.Store.
func (s *Store) PayoutByReference(ctx context.Context, connectorID, reference string) (ledger.Payout, bool, error) {
	p, err := scanPayout(s.pool.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE connector_id = $1 AND provider_reference = $2`,
		connectorID, reference))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	return p, err == nil, mapErr(err, "payout")
}

// ImportPayout implements ledger.Store.
func (s *Store) ImportPayout(ctx context.Context, plan ledger.PayoutPlan) (bool, []outbox.Task, error) {
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		tasks, err = s.writePayout(ctx, tx, plan, nil)
		return err
	})
	if errors.Is(err, errImported) {
		return false, nil, nil
	}
	return err == nil, tasks, err
}

// CreatePayout implements ledger.Store.
func (s *Store) CreatePayout(ctx context.Context, idem *idempotency.Request, a ledger.Account, at time.Time, plan func(int64) (ledger.PayoutPlan, error)) (*idempotency.Response, []outbox.Task, error) {
	var replay *idempotency.Response
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if stored, err := s.claimOrReplay(ctx, tx, a.MerchantID, idem); err != nil || stored != nil {
			replay = stored
			return err
		}
		if _, err := tx.Exec(ctx, lockAccount, a.MerchantID, a.ConnectorID, a.Currency); err != nil {
			return mapErr(err, "balance")
		}
		var available int64
		if err := tx.QueryRow(ctx, availableBalance, a.MerchantID, a.ConnectorID, a.Currency, at).Scan(&available); err != nil {
			return mapErr(err, "balance")
		}
		p, err := plan(available)
		if err != nil {
			return err
		}
		audit.SetObject(ctx, "payout", p.Payout.ID)
		if tasks, err = s.writePayout(ctx, tx, p, nil); err != nil {
			return err
		}
		if idem != nil {
			_, err := tx.Exec(ctx, completeIdempotency, a.MerchantID, idem.Key, p.Response.Status, p.Response.Body)
			return mapErr(err, "idempotency key")
		}
		return nil
	})
	if err != nil && idem != nil && lockTimeout(err) {
		return nil, nil, idempotency.ErrInUse()
	}
	return replay, tasks, err
}

// PayoutByID implements ledger.Store.
func (s *Store) PayoutByID(ctx context.Context, merchantID, id string) (ledger.Payout, error) {
	p, err := scanPayout(s.pool.QueryRow(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE id = $1 AND merchant_id = $2`, id, merchantID))
	return p, mapErr(err, "payout")
}

// ListPayouts implements ledger.Store.
func (s *Store) ListPayouts(ctx context.Context, merchantID string, f ledger.PayoutFilter, p listing.Params) (listing.Page[ledger.Payout], error) {
	query := `SELECT ` + payoutColumns + ` FROM payouts WHERE merchant_id = $1`
	args := []any{merchantID}
	if f.Status != "" {
		args = append(args, f.Status)
		query += ` AND status = $` + strconv.Itoa(len(args))
	}
	if f.ConnectorID != "" {
		args = append(args, f.ConnectorID)
		query += ` AND connector_id = $` + strconv.Itoa(len(args))
	}
	return listPage(ctx, s, query, args, p, scanPayout, "payout")
}

// OpenPayouts implements ledger.Store.
func (s *Store) OpenPayouts(ctx context.Context, limit int) ([]ledger.Payout, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE status IN ('pending', 'in_transit')
ORDER BY updated_at LIMIT $1`, limit)
	if err != nil {
		return nil, mapErr(err, "payout")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Payout, error) { return scanPayout(r) })
	return list, mapErr(err, "payout")
}

const movePayout = `UPDATE payouts SET status = $3, failure_code = $4, failure_message = $5, updated_at = $6
WHERE id = $1 AND status = $2`

// MovePayout implements ledger.Store.
func (s *Store) MovePayout(ctx context.Context, m ledger.PayoutMove) (bool, []outbox.Task, error) {
	if !ledger.CanMovePayout(m.Before, m.After.Status) {
		return false, nil, fmt.Errorf("store: a payout does not move from %s to %s", m.Before, m.After.Status)
	}
	moved := false
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		a := m.After
		tag, err := tx.Exec(ctx, movePayout, a.ID, m.Before, a.Status, a.FailureCode, a.FailureMessage, a.UpdatedAt)
		if err != nil || tag.RowsAffected() == 0 {
			return mapErr(err, "payout")
		}
		moved = true
		if m.Transaction != nil {
			if _, err := book(ctx, tx, *m.Transaction); err != nil {
				return err
			}
		}
		if m.Event != nil {
			tasks, err = s.writePayoutEvent(ctx, tx, a.ID, *m.Event)
		}
		return err
	})
	return moved, tasks, err
}

// ScheduledAccounts implements ledger.Store: the accounts with transactions
// of sandbox connectors on the daily schedule, found by a skip scan of
// balance_transactions_balance_idx (one probe per account, not per
// transaction).
const scheduledAccounts = `
WITH RECURSIVE acc AS (
	(SELECT merchant_id, currency, connector_id FROM balance_transactions
	 ORDER BY merchant_id, currency, connector_id LIMIT 1)
	UNION ALL
	SELECT n.* FROM acc, LATERAL (
		SELECT merchant_id, currency, connector_id FROM balance_transactions
		WHERE (merchant_id, currency, connector_id) > (acc.merchant_id, acc.currency, acc.connector_id)
		ORDER BY merchant_id, currency, connector_id LIMIT 1) n
)
SELECT acc.merchant_id, acc.connector_id, acc.currency FROM acc
JOIN connectors c ON c.id = acc.connector_id AND c.provider = 'sandbox' AND c.payout_schedule = 'daily'`

func (s *Store) ScheduledAccounts(ctx context.Context) ([]ledger.Account, error) {
	rows, err := s.pool.Query(ctx, scheduledAccounts)
	if err != nil {
		return nil, mapErr(err, "balance")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.Account, error) {
		var a ledger.Account
		err := r.Scan(&a.MerchantID, &a.ConnectorID, &a.Currency)
		return a, err
	})
	return list, mapErr(err, "balance")
}

const (
	slotTaken = `SELECT EXISTS (SELECT 1 FROM payouts WHERE connector_id = $1 AND currency = $2 AND schedule_slot = $3)`
	// unsettled picks the account's available balance transactions that no
	// automatic payout paid out yet.
	unsettled = `SELECT t.id, t.amount - t.fee FROM balance_transactions t
WHERE t.merchant_id = $1 AND t.connector_id = $2 AND t.currency = $3 AND t.available_on <= $4
	AND NOT EXISTS (SELECT 1 FROM payout_settlements s WHERE s.merchant_id = t.merchant_id AND s.txn_id = t.id)`
	settle = `INSERT INTO payout_settlements (merchant_id, txn_id, payout_id) SELECT $1, unnest($2::text[]), $3`
)

// CreateAutomaticPayout implements ledger.Store.
func (s *Store) CreateAutomaticPayout(ctx context.Context, a ledger.Account, slot, at time.Time, plan func(int64) (*ledger.PayoutPlan, error)) (bool, []outbox.Task, error) {
	made := false
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockAccount, a.MerchantID, a.ConnectorID, a.Currency); err != nil {
			return mapErr(err, "balance")
		}
		var taken bool
		if err := tx.QueryRow(ctx, slotTaken, a.ConnectorID, a.Currency, slot).Scan(&taken); err != nil || taken {
			return mapErr(err, "payout")
		}
		var picked []string
		var total int64
		rows, err := tx.Query(ctx, unsettled, a.MerchantID, a.ConnectorID, a.Currency, at)
		if err != nil {
			return mapErr(err, "balance transaction")
		}
		for rows.Next() {
			var id string
			var net int64
			if err := rows.Scan(&id, &net); err != nil {
				rows.Close()
				return mapErr(err, "balance transaction")
			}
			picked, total = append(picked, id), total+net
		}
		if err := rows.Err(); err != nil {
			return mapErr(err, "balance transaction")
		}
		p, err := plan(total)
		if err != nil || p == nil {
			return err
		}
		if tasks, err = s.writePayout(ctx, tx, *p, &slot); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, settle, a.MerchantID, append(picked, p.Transaction.ID), p.Payout.ID); err != nil {
			return mapErr(err, "payout")
		}
		made = true
		return nil
	})
	return made, tasks, err
}
