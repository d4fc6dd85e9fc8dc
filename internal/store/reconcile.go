package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	recon "github.com/gatehouse-pay/gatehouse/internal/reconcile"
)

// Reconciliation (docs/ledger.md#reconciliation): reconciliations and
// their exceptions (migration 00024), and the reads of the books they
// compare.

const (
	// selectMovements reads a connector's transactions of some days
	// through balance_transactions_available_idx.
	selectMovements = `SELECT ` + txnColumns + ` FROM balance_transactions
WHERE merchant_id = $1 AND connector_id = $2 AND available_on >= $3 AND available_on < $4
	AND provider_reference IS NOT NULL AND type <> 'adjustment'`
	// selectAdjustments reads a connector's adjustments of some references
	// (balance_transactions_adjustments_idx), each with the type of the
	// exception it resolved, if it did.
	selectAdjustments = `SELECT ` + txnColumns + `,
	coalesce((SELECT x.type FROM reconciliation_exceptions x
		WHERE x.merchant_id = balance_transactions.merchant_id AND x.adjustment_id = balance_transactions.id), '')
FROM balance_transactions
WHERE merchant_id = $1 AND connector_id = $2 AND type = 'adjustment' AND provider_reference = ANY($3)`
)

// Movements implements reconcile.Store.
func (s *Store) Movements(ctx context.Context, merchantID, connectorID string, from, to time.Time) ([]recon.Movement, error) {
	rows, err := s.pool.Query(ctx, selectMovements, merchantID, connectorID, from, to)
	if err != nil {
		return nil, mapErr(err, "balance transaction")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (recon.Movement, error) {
		t, err := scanTxn(r)
		return recon.Movement{Transaction: t}, err
	})
	return list, mapErr(err, "balance transaction")
}

// Adjustments implements reconcile.Store.
func (s *Store) Adjustments(ctx context.Context, merchantID, connectorID string, references []string) ([]recon.Movement, error) {
	if len(references) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, selectAdjustments, merchantID, connectorID, references)
	if err != nil {
		return nil, mapErr(err, "balance transaction")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (recon.Movement, error) {
		var m recon.Movement
		t, err := scanTxnWith(r, &m.ExceptionType)
		m.Transaction = t
		return m, err
	})
	return list, mapErr(err, "balance transaction")
}

const reconciliationColumns = `id, merchant_id, connector_id, source, dates, lines, matched, missing_in_gateway,
missing_at_provider, amount_mismatch, fee_mismatch, open_exceptions, created_at`

func scanReconciliation(row pgx.Row) (recon.Reconciliation, error) {
	var r recon.Reconciliation
	err := row.Scan(&r.ID, &r.MerchantID, &r.ConnectorID, &r.Source, &r.Dates, &r.Lines, &r.Matched, &r.MissingInGateway,
		&r.MissingAtProvider, &r.AmountMismatch, &r.FeeMismatch, &r.OpenExceptions, &r.CreatedAt)
	for i, d := range r.Dates {
		r.Dates[i] = recon.Day(d)
	}
	return r, err
}

var exceptionColumnNames = []string{"id", "merchant_id", "reconciliation_id", "connector_id", "kind", "provider_reference", "type",
	"currency", "line", "gateway_object", "gateway_transaction", "provider_gross", "provider_fee", "provider_net", "gateway_gross",
	"gateway_fee", "gateway_net", "status", "action", "note", "adjustment_id", "resolved_at", "created_at"}

const exceptionColumns = `id, merchant_id, reconciliation_id, connector_id, kind, provider_reference, type, currency, line,
gateway_object, gateway_transaction, provider_gross, provider_fee, provider_net, gateway_gross, gateway_fee, gateway_net,
status, action, note, adjustment_id, resolved_at, created_at`

func scanException(row pgx.Row) (recon.Exception, error) {
	var e recon.Exception
	var line *int
	var object, txn, action, adjustment *string
	var pg, pf, pn, gg, gf, gn *int64
	var note *string
	var resolvedAt *time.Time
	err := row.Scan(&e.ID, &e.MerchantID, &e.ReconciliationID, &e.ConnectorID, &e.Kind, &e.ProviderReference, &e.Type, &e.Currency,
		&line, &object, &txn, &pg, &pf, &pn, &gg, &gf, &gn, &e.Status, &action, &note, &adjustment, &resolvedAt, &e.CreatedAt)
	if err != nil {
		return e, err
	}
	if line != nil {
		e.Line = *line
	}
	e.GatewayObject, e.GatewayTransaction = deref(object), deref(txn)
	if pg != nil && pf != nil && pn != nil {
		e.Provider = &recon.Amounts{Gross: *pg, Fee: *pf, Net: *pn}
	}
	if gg != nil && gf != nil && gn != nil {
		e.Gateway = &recon.Amounts{Gross: *gg, Fee: *gf, Net: *gn}
	}
	if action != nil && resolvedAt != nil {
		e.Resolution = &recon.Resolution{Action: *action, Note: note, TransactionID: deref(adjustment), ResolvedAt: *resolvedAt}
	}
	return e, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// exceptionRow is e's row for COPY, in exceptionColumnNames' order.
func exceptionRow(e recon.Exception) []any {
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	side := func(a *recon.Amounts) []any {
		if a == nil {
			return []any{nil, nil, nil}
		}
		return []any{a.Gross, a.Fee, a.Net}
	}
	var line any
	if e.Line > 0 {
		line = int32(e.Line)
	}
	row := []any{e.ID, e.MerchantID, e.ReconciliationID, e.ConnectorID, e.Kind, e.ProviderReference, e.Type, e.Currency, line,
		nullable(e.GatewayObject), nullable(e.GatewayTransaction)}
	row = append(row, side(e.Provider)...)
	row = append(row, side(e.Gateway)...)
	return append(row, e.Status, nil, nil, nil, nil, e.CreatedAt)
}

const insertReconciliation = `INSERT INTO reconciliations (` + reconciliationColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

// CreateReconciliation implements reconcile.Store. The exceptions are
// copied in (COPY), however many the books' side brings.
func (s *Store) CreateReconciliation(ctx context.Context, idem *idempotency.Request, r recon.Reconciliation, exceptions []recon.Exception,
	fees []ledger.Transaction, response idempotency.Response) (*idempotency.Response, error) {
	var replay *idempotency.Response
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if stored, err := s.claimOrReplay(ctx, tx, r.MerchantID, idem); err != nil || stored != nil {
			replay = stored
			return err
		}
		audit.SetObject(ctx, "reconciliation", r.ID)
		if _, err := tx.Exec(ctx, insertReconciliation, r.ID, r.MerchantID, r.ConnectorID, r.Source, r.Dates, r.Lines, r.Matched,
			r.MissingInGateway, r.MissingAtProvider, r.AmountMismatch, r.FeeMismatch, r.OpenExceptions, r.CreatedAt); err != nil {
			return mapErr(err, "reconciliation")
		}
		if len(exceptions) > 0 {
			rows := make([][]any, len(exceptions))
			for i, e := range exceptions {
				rows[i] = exceptionRow(e)
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"reconciliation_exceptions"}, exceptionColumnNames, pgx.CopyFromRows(rows)); err != nil {
				return mapErr(err, "reconciliation exception")
			}
		}
		for _, f := range fees {
			if _, err := book(ctx, tx, f); err != nil {
				return err
			}
		}
		if idem != nil {
			_, err := tx.Exec(ctx, completeIdempotency, r.MerchantID, idem.Key, response.Status, response.Body)
			return mapErr(err, "idempotency key")
		}
		return nil
	})
	if err != nil && idem != nil && lockTimeout(err) {
		return nil, idempotency.ErrInUse()
	}
	return replay, err
}

// ReconciliationByID implements reconcile.Store.
func (s *Store) ReconciliationByID(ctx context.Context, merchantID, id string) (recon.Reconciliation, error) {
	r, err := scanReconciliation(s.pool.QueryRow(ctx, `SELECT `+reconciliationColumns+` FROM reconciliations WHERE id = $1 AND merchant_id = $2`, id, merchantID))
	return r, mapErr(err, "reconciliation")
}

// ListReconciliations implements reconcile.Store.
func (s *Store) ListReconciliations(ctx context.Context, merchantID string, f recon.Filter, p listing.Params) (listing.Page[recon.Reconciliation], error) {
	query := `SELECT ` + reconciliationColumns + ` FROM reconciliations WHERE merchant_id = $1`
	args := []any{merchantID}
	if f.ConnectorID != "" {
		args = append(args, f.ConnectorID)
		query += ` AND connector_id = $` + strconv.Itoa(len(args))
	}
	return listPage(ctx, s, query, args, p, scanReconciliation, "reconciliation")
}

// ListExceptions implements reconcile.Store.
func (s *Store) ListExceptions(ctx context.Context, merchantID, reconciliationID string, f recon.ExceptionFilter, p listing.Params) (listing.Page[recon.Exception], error) {
	var found bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM reconciliations WHERE id = $1 AND merchant_id = $2)`,
		reconciliationID, merchantID).Scan(&found); err != nil || !found {
		if err == nil {
			err = pgx.ErrNoRows
		}
		return listing.Page[recon.Exception]{}, mapErr(err, "reconciliation")
	}
	query := `SELECT ` + exceptionColumns + ` FROM reconciliation_exceptions WHERE reconciliation_id = $1 AND merchant_id = $2`
	args := []any{reconciliationID, merchantID}
	for _, c := range []struct{ column, v string }{{"status", f.Status}, {"kind", f.Kind}} {
		if c.v != "" {
			args = append(args, c.v)
			query += ` AND ` + c.column + ` = $` + strconv.Itoa(len(args))
		}
	}
	return listPage(ctx, s, query, args, p, scanException, "reconciliation exception")
}

// selectOpenExceptions reads a merchant's open exceptions across its
// reconciliations: the runs that still have one (reconciliations_merchant_idx;
// a merchant has a run per connector and day at most, give or take), then
// their exceptions (reconciliation_exceptions_run_idx). listPage orders
// them by id: the newest run's first, each run's in its report's order.
const selectOpenExceptions = `SELECT ` + exceptionColumns + ` FROM reconciliation_exceptions
WHERE merchant_id = $1 AND status = 'open'
	AND reconciliation_id IN (SELECT id FROM reconciliations WHERE merchant_id = $1 AND open_exceptions > 0)`

// ListOpenExceptions implements reconcile.Store.
func (s *Store) ListOpenExceptions(ctx context.Context, merchantID string, p listing.Params) (listing.Page[recon.Exception], error) {
	return listPage(ctx, s, selectOpenExceptions, []any{merchantID}, p, scanException, "reconciliation exception")
}

const (
	lockException = `SELECT ` + exceptionColumns + ` FROM reconciliation_exceptions
WHERE id = $1 AND merchant_id = $2 AND reconciliation_id = $3 FOR UPDATE`
	resolveException = `UPDATE reconciliation_exceptions SET status = 'resolved', action = $2, note = $3, adjustment_id = $4,
	resolved_at = $5 WHERE id = $1 AND status = 'open'`
	// An exception resolved leaves one fewer open in its reconciliation.
	closeException = `UPDATE reconciliations SET open_exceptions = open_exceptions - 1 WHERE id = $1`
)

// ResolveException implements reconcile.Store.
func (s *Store) ResolveException(ctx context.Context, idem *idempotency.Request, merchantID, reconciliationID, exceptionID string,
	plan func(recon.Exception) (recon.Resolved, error)) (*idempotency.Response, error) {
	var replay *idempotency.Response
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if stored, err := s.claimOrReplay(ctx, tx, merchantID, idem); err != nil || stored != nil {
			replay = stored
			return err
		}
		e, err := scanException(tx.QueryRow(ctx, lockException, exceptionID, merchantID, reconciliationID))
		if err != nil {
			return mapErr(err, "reconciliation exception")
		}
		res, err := plan(e)
		if err != nil {
			return err
		}
		r := res.Exception.Resolution
		if r == nil {
			return fmt.Errorf("store: exception %s resolved without a resolution", e.ID)
		}
		if res.Adjustment != nil {
			booked, err := book(ctx, tx, *res.Adjustment)
			if err != nil {
				return err
			}
			if !booked {
				return fmt.Errorf("store: the adjustment of exception %s was booked before it was resolved", e.ID)
			}
		}
		var adjustment *string
		if r.TransactionID != "" {
			adjustment = &r.TransactionID
		}
		tag, err := tx.Exec(ctx, resolveException, e.ID, r.Action, r.Note, adjustment, r.ResolvedAt)
		if err != nil || tag.RowsAffected() != 1 {
			return fmt.Errorf("store: exception %s not resolved: %w", e.ID, mapErr(err, "reconciliation exception"))
		}
		if _, err := tx.Exec(ctx, closeException, reconciliationID); err != nil {
			return mapErr(err, "reconciliation")
		}
		if idem != nil {
			_, err := tx.Exec(ctx, completeIdempotency, merchantID, idem.Key, res.Response.Status, res.Response.Body)
			return mapErr(err, "idempotency key")
		}
		return nil
	})
	if err != nil && idem != nil && lockTimeout(err) {
		return nil, idempotency.ErrInUse()
	}
	return replay, err
}
