package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
)

const refundColumns = `id, merchant_id, charge_id, amount, currency, status, reason, metadata, provider_reference,
failure_code, created_at, updated_at`

func scanRefund(row pgx.Row) (refunds.Refund, error) {
	var r refunds.Refund
	err := row.Scan(&r.ID, &r.MerchantID, &r.ChargeID, &r.Amount, &r.Currency, &r.Status, &r.Reason, &r.Metadata,
		&r.ProviderReference, &r.FailureCode, &r.CreatedAt, &r.UpdatedAt)
	return r, err
}

const (
	lockCharge   = `SELECT ` + chargeColumns + ` FROM charges WHERE id = $1 AND merchant_id = $2 FOR UPDATE`
	holdRefund   = `UPDATE charges SET amount_refund_held = amount_refund_held + $2 WHERE id = $1`
	insertRefund = `INSERT INTO refunds (` + refundColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL, $9, $9)`
)

// CreateRefund implements refunds.Store. The charge row stays locked from the
// check of what remains refundable to the commit, so concurrent refunds of one
// charge are decided one after the other.
func (s *Store) CreateRefund(ctx context.Context, merchantID, chargeID string, idem *idempotency.Request, plan func(charges.Charge) (refunds.Plan, error)) (*idempotency.Response, []outbox.Task, error) {
	var replay *idempotency.Response
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if stored, err := s.claimOrReplay(ctx, tx, merchantID, idem); err != nil || stored != nil {
			replay = stored
			return err
		}
		c, err := scanCharge(tx.QueryRow(ctx, lockCharge, chargeID, merchantID))
		if err != nil {
			return mapErr(err, "charge")
		}
		if err := tx.QueryRow(ctx, openDisputed, c.ID).Scan(&c.AmountDisputed); err != nil {
			return mapErr(err, "dispute")
		}
		p, err := plan(c)
		if err != nil {
			return err
		}
		r := p.Refund
		audit.SetObject(ctx, "refund", r.ID)
		b := &pgx.Batch{}
		b.Queue(holdRefund, c.ID, r.Amount)
		b.Queue(insertRefund, r.ID, r.MerchantID, r.ChargeID, r.Amount, r.Currency, r.Status, r.Reason, r.Metadata, r.CreatedAt)
		b.Queue(insertOutbox, p.Task.ID(), p.Task.Type, p.Task.RefID)
		if idem != nil {
			b.Queue(completeIdempotency, merchantID, idem.Key, p.Response.Status, p.Response.Body)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return mapErr(err, "refund")
		}
		tasks, err = s.writeEvent(ctx, tx, r, p.Event)
		return err
	})
	if err != nil && idem != nil && lockTimeout(err) {
		return nil, nil, idempotency.ErrInUse()
	}
	return replay, tasks, err
}

const selectRefund = `SELECT ` + refundColumns + ` FROM refunds WHERE id = $1 AND merchant_id = $2`

// RefundByID returns the merchant's refund or NotFound.
func (s *Store) RefundByID(ctx context.Context, merchantID, id string) (refunds.Refund, error) {
	r, err := scanRefund(s.pool.QueryRow(ctx, selectRefund, id, merchantID))
	return r, mapErr(err, "refund")
}

// ListRefunds returns a page of the merchant's refunds, of one charge if chargeID is set.
func (s *Store) ListRefunds(ctx context.Context, merchantID, chargeID string, p listing.Params) (listing.Page[refunds.Refund], error) {
	query := `SELECT ` + refundColumns + ` FROM refunds WHERE merchant_id = $1`
	args := []any{merchantID}
	if chargeID != "" {
		args = append(args, chargeID)
		query += ` AND charge_id = $2`
	}
	return listPage(ctx, s, query, args, p, scanRefund, "refund")
}

const (
	selectRefundForWork = `SELECT ` + refundColumns + ` FROM refunds WHERE id = $1`
	selectChargeByID    = `SELECT ` + chargeColumns + ` FROM charges WHERE id = $1`
)

// RefundForWork returns a refund and its charge for the worker.
func (s *Store) RefundForWork(ctx context.Context, id string) (refunds.Refund, charges.Charge, error) {
	r, err := scanRefund(s.pool.QueryRow(ctx, selectRefundForWork, id))
	if err != nil {
		return r, charges.Charge{}, mapErr(err, "refund")
	}
	c, err := scanCharge(s.pool.QueryRow(ctx, selectChargeByID, r.ChargeID))
	return r, c, mapErr(err, "charge")
}

const (
	settleRefund = `UPDATE refunds SET status = $2, provider_reference = $3, failure_code = $4, updated_at = $5
WHERE id = $1 AND status = 'pending' RETURNING ` + refundColumns
	releaseRefunded = `UPDATE charges SET amount_refunded = amount_refunded + $2, amount_refund_held = amount_refund_held - $2,
	status = CASE WHEN amount_refunded + $2 >= amount_captured THEN 'refunded' ELSE status END,
	updated_at = $3
WHERE id = $1 RETURNING ` + chargeColumns
	releaseFailed = `UPDATE charges SET amount_refund_held = amount_refund_held - $2 WHERE id = $1 AND $3::timestamptz IS NOT NULL
RETURNING ` + chargeColumns
)

// SettleRefund implements refunds.Store.
// awaitRefund records the provider's reference of a pending refund and
// deletes its task, in one statement.
const awaitRefund = `WITH upd AS (
	UPDATE refunds SET provider_reference = $2, updated_at = $3 WHERE id = $1 AND status = 'pending' RETURNING id
)
DELETE FROM outbox WHERE task_id = $4`

// AwaitRefund implements refunds.Store.
func (s *Store) AwaitRefund(ctx context.Context, id, providerReference, doneTask string, at time.Time) error {
	_, err := s.pool.Exec(ctx, awaitRefund, id, providerReference, at, doneTask)
	return mapErr(err, "refund")
}

func (s *Store) SettleRefund(ctx context.Context, after refunds.Refund, doneTask string, settle func(refunds.Refund, charges.Charge) (refunds.Settlement, error)) (bool, []outbox.Task, error) {
	applied := false
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		r, err := scanRefund(tx.QueryRow(ctx, settleRefund, after.ID, after.Status, after.ProviderReference, after.FailureCode, after.UpdatedAt))
		if errors.Is(err, pgx.ErrNoRows) {
			_, err := tx.Exec(ctx, deleteTask, doneTask)
			return mapErr(err, "task")
		}
		if err != nil {
			return mapErr(err, "refund")
		}
		release := releaseFailed
		if r.Status == refunds.StatusSucceeded {
			release = releaseRefunded
		}
		c, err := scanCharge(tx.QueryRow(ctx, release, r.ChargeID, r.Amount, r.UpdatedAt))
		if err != nil {
			return mapErr(err, "charge")
		}
		st, err := settle(r, c)
		if err != nil {
			return apperr.Internal(err)
		}
		if st.Booking != nil {
			if _, err := book(ctx, tx, *st.Booking); err != nil {
				return err
			}
		}
		for _, e := range st.Events {
			t, err := s.writeEvent(ctx, tx, r, e)
			if err != nil {
				return err
			}
			tasks = append(tasks, t...)
		}
		if _, err := tx.Exec(ctx, deleteTask, doneTask); err != nil {
			return mapErr(err, "task")
		}
		applied = true
		return nil
	})
	return applied, tasks, err
}
