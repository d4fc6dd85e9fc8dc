package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

var _ disputes.Store = (*Store)(nil)

const disputeColumns = `id, merchant_id, environment, charge_id::text, connector_id, provider, provider_reference, amount, currency,
reason, status, rank, funds_phase, fee, evidence, evidence_submitted_at, evidence_due_by, evidence_due_reported,
closed_by_merchant, created_at, updated_at`

func scanDispute(row pgx.Row) (disputes.Dispute, error) {
	var d disputes.Dispute
	err := row.Scan(&d.ID, &d.MerchantID, &d.Environment, &d.ChargeID, &d.ConnectorID, &d.Provider, &d.ProviderReference,
		&d.Amount, &d.Currency, &d.Reason, &d.Status, &d.Rank, &d.FundsPhase, &d.Fee, &d.Evidence, &d.EvidenceSubmittedAt,
		&d.EvidenceDueBy, &d.DueReported, &d.ClosedByMerchant, &d.CreatedAt, &d.UpdatedAt)
	return d, err
}

const (
	// insertDispute names the columns itself: disputeColumns reads
	// charge_id as text, which no INSERT's column list can take.
	insertDispute = `INSERT INTO disputes (id, merchant_id, environment, charge_id, connector_id, provider, provider_reference, amount,
currency, reason, status, rank, funds_phase, fee, evidence, evidence_submitted_at, evidence_due_by, evidence_due_reported,
closed_by_merchant, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`
	updateDispute = `UPDATE disputes SET status = $2, rank = $3, funds_phase = $4, evidence = $5, evidence_submitted_at = $6,
evidence_due_by = $7, evidence_due_reported = $8, closed_by_merchant = $9, updated_at = $10 WHERE id = $1`

	// lockDisputedCharge finds and locks the charge a provider's dispute
	// is about: every change of its disputes and every refund of it is
	// decided with its row locked.
	lockDisputedCharge = `SELECT id::text, environment FROM charges WHERE provider_reference = $1 AND merchant_id = $2
ORDER BY id LIMIT 1 FOR UPDATE`
	// lockChargeOfDispute finds and locks the charge of the connector's
	// dispute reference, for a report that names no payment.
	lockChargeOfDispute = `SELECT c.id::text, c.environment FROM charges c JOIN disputes d ON d.charge_id = c.id
WHERE d.connector_id = $1 AND d.provider_reference = $2 AND d.merchant_id = $3 AND c.merchant_id = $3 FOR UPDATE OF c`
	lockProviderDispute = `SELECT ` + disputeColumns + ` FROM disputes WHERE connector_id = $1 AND provider_reference = $2 FOR UPDATE`
	lockDispute         = `SELECT ` + disputeColumns + ` FROM disputes WHERE id = $1 AND merchant_id = $2 FOR UPDATE`

	// insertDisputeEvent writes one event of a dispute, numbered by the
	// dispute's counter, and its deliveries. The event is its charge's
	// too (GET /v1/events?charge=).
	insertDisputeEvent = `
WITH seq AS (
	UPDATE disputes SET event_seq = event_seq + 1 WHERE id = $7 RETURNING event_seq
), ev AS (
	INSERT INTO events (id, merchant_id, environment, type, body, created_at, charge_id, object_id, sequence)
	SELECT $1, $2, $3, $4, $5, $6, $9::uuid, $8::uuid, seq.event_seq FROM seq
	RETURNING ` + eventReturning + `
)` + fanout + `
SELECT ` + deliveriesOf

	// openDisputed sums what a charge's disputes hold withdrawn (an odd
	// funds phase): the money already went back to the cardholder, so a
	// refund of it would pay twice. An inquiry, or a chargeback its
	// provider has not debited yet, holds nothing.
	openDisputed = `SELECT coalesce(sum(amount), 0) FROM disputes WHERE charge_id = $1::uuid AND funds_phase % 2 = 1`
)

// ApplyDispute implements disputes.Store.
func (s *Store) ApplyDispute(ctx context.Context, merchantID, connectorID, paymentRef, reference string,
	plan func(cur *disputes.Dispute, p disputes.Payment) (*disputes.Plan, error)) (bool, []outbox.Task, error) {
	found := false
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		p := disputes.Payment{ConnectorID: connectorID}
		query, args := lockDisputedCharge, []any{paymentRef, merchantID}
		if paymentRef == "" {
			query, args = lockChargeOfDispute, []any{connectorID, reference, merchantID}
		}
		err := tx.QueryRow(ctx, query, args...).Scan(&p.ChargeID, &p.Environment)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return mapErr(err, "charge")
		}
		found = true
		var cur *disputes.Dispute
		d, err := scanDispute(tx.QueryRow(ctx, lockProviderDispute, connectorID, reference))
		switch {
		case err == nil:
			cur = &d
		case !errors.Is(err, pgx.ErrNoRows):
			return mapErr(err, "dispute")
		}
		pl, err := plan(cur, p)
		if err != nil || pl == nil {
			return err
		}
		tasks, err = s.writeDispute(ctx, tx, pl)
		return err
	})
	return found, tasks, err
}

// writeDispute writes a planned change of a dispute: its row, its
// bookings (each once by its cause), its events and its task.
func (s *Store) writeDispute(ctx context.Context, tx pgx.Tx, pl *disputes.Plan) ([]outbox.Task, error) {
	d := pl.Dispute
	ev := d.Evidence
	if ev == nil {
		ev = disputes.Evidence{}
	}
	var err error
	if pl.Created {
		_, err = tx.Exec(ctx, insertDispute, d.ID, d.MerchantID, d.Environment, d.ChargeID, d.ConnectorID, d.Provider,
			d.ProviderReference, d.Amount, d.Currency, d.Reason, d.Status, d.Rank, d.FundsPhase, d.Fee, ev,
			d.EvidenceSubmittedAt, d.EvidenceDueBy, d.DueReported, d.ClosedByMerchant, d.CreatedAt, d.UpdatedAt)
	} else {
		_, err = tx.Exec(ctx, updateDispute, d.ID, d.Status, d.Rank, d.FundsPhase, ev, d.EvidenceSubmittedAt,
			d.EvidenceDueBy, d.DueReported, d.ClosedByMerchant, d.UpdatedAt)
	}
	if err != nil {
		return nil, mapErr(err, "dispute")
	}
	for _, t := range pl.Transactions {
		if _, err := book(ctx, tx, t); err != nil {
			return nil, err
		}
	}
	var tasks []outbox.Task
	for _, e := range pl.Events {
		ts, err := s.writeDisputeEvent(ctx, tx, d, e)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, ts...)
	}
	if pl.Task != nil {
		if _, err := tx.Exec(ctx, insertOutbox, pl.Task.ID(), pl.Task.Type, pl.Task.RefID); err != nil {
			return nil, mapErr(err, "dispute")
		}
		tasks = append(tasks, *pl.Task)
	}
	return tasks, nil
}

func (s *Store) writeDisputeEvent(ctx context.Context, tx pgx.Tx, d disputes.Dispute, e events.Event) ([]outbox.Task, error) {
	u, ok := ids.UUIDOf(disputes.Prefix, d.ID)
	if !ok {
		return nil, fmt.Errorf("store: %q is not a dispute id", d.ID)
	}
	var evs []string
	if err := tx.QueryRow(ctx, insertDisputeEvent, e.ID, e.MerchantID, e.Environment, e.Type, e.Body, e.CreatedAt,
		d.ID, u, d.ChargeID).Scan(&evs); err != nil {
		return nil, mapErr(err, "event")
	}
	return deliveryTasks(evs), nil
}

// ActOnDispute implements disputes.Store.
func (s *Store) ActOnDispute(ctx context.Context, merchantID, id string, idem *idempotency.Request,
	plan func(d disputes.Dispute) (*disputes.Plan, error)) (*idempotency.Response, []outbox.Task, error) {
	var replay *idempotency.Response
	var tasks []outbox.Task
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if stored, err := s.claimOrReplay(ctx, tx, merchantID, idem); err != nil || stored != nil {
			replay = stored
			return err
		}
		d, err := scanDispute(tx.QueryRow(ctx, lockDispute, id, merchantID))
		if err != nil {
			return mapErr(err, "dispute")
		}
		audit.SetObject(ctx, "dispute", d.ID)
		pl, err := plan(d)
		if err != nil {
			return err
		}
		if tasks, err = s.writeDispute(ctx, tx, pl); err != nil {
			return err
		}
		if idem != nil && pl.Response != nil {
			_, err := tx.Exec(ctx, completeIdempotency, merchantID, idem.Key, pl.Response.Status, pl.Response.Body)
			return mapErr(err, "idempotency key")
		}
		return nil
	})
	if err != nil && idem != nil && lockTimeout(err) {
		return nil, nil, idempotency.ErrInUse()
	}
	return replay, tasks, err
}

// DisputeByID implements disputes.Store.
func (s *Store) DisputeByID(ctx context.Context, merchantID, id string) (disputes.Dispute, error) {
	d, err := scanDispute(s.pool.QueryRow(ctx, `SELECT `+disputeColumns+` FROM disputes WHERE id = $1 AND merchant_id = $2`, id, merchantID))
	return d, mapErr(err, "dispute")
}

// DisputeForWork implements disputes.Store.
func (s *Store) DisputeForWork(ctx context.Context, id string) (disputes.Dispute, error) {
	d, err := scanDispute(s.pool.QueryRow(ctx, `SELECT `+disputeColumns+` FROM disputes WHERE id = $1`, id))
	return d, mapErr(err, "dispute")
}

// ListDisputes implements disputes.Store.
func (s *Store) ListDisputes(ctx context.Context, merchantID string, f disputes.Filter, p listing.Params) (listing.Page[disputes.Dispute], error) {
	query := `SELECT ` + disputeColumns + ` FROM disputes WHERE merchant_id = $1`
	args := []any{merchantID}
	if f.ChargeID != "" {
		args = append(args, f.ChargeID)
		query += ` AND charge_id = $` + strconv.Itoa(len(args)) + `::uuid`
	}
	if f.Status != "" {
		args = append(args, f.Status)
		query += ` AND status = $` + strconv.Itoa(len(args))
	}
	return listPage(ctx, s, query, args, p, scanDispute, "dispute")
}

// disputesByDeadline orders the merchant's disputes as the dashboard
// lists them (disputes.Store.DisputesByDeadline): first those waiting for
// the merchant's evidence, then those under review, each by deadline
// (evidence_due_by, soonest first), then the closed ones, the latest
// deadline first; the id breaks ties. grp and k are the sort key, so a page
// starts after the key of the previous page's last dispute ($2).
const disputesByDeadline = `
WITH d AS (
	SELECT ` + disputeColumns + `,
		CASE WHEN status IN ('needs_response', 'warning_needs_response') AND evidence_submitted_at IS NULL THEN 0
			WHEN status IN ('won', 'lost', 'warning_closed') THEN 2 ELSE 1 END AS grp,
		CASE WHEN status IN ('won', 'lost', 'warning_closed') THEN -extract(epoch FROM evidence_due_by)
			ELSE extract(epoch FROM evidence_due_by) END AS k
	FROM disputes WHERE merchant_id = $1 AND ($3 = '' OR status = $3)
)
SELECT ` + disputeColumns + ` FROM d
WHERE $2 = '' OR (grp, k, id) > (SELECT grp, k, id FROM d WHERE id = $2)
ORDER BY grp, k, id LIMIT $4`

// DisputesByDeadline implements disputes.Store.
func (s *Store) DisputesByDeadline(ctx context.Context, merchantID string, f disputes.Filter, after string, limit int) (listing.Page[disputes.Dispute], error) {
	var list []disputes.Dispute
	err := s.read(ctx, false, func(db dbtx) error {
		rows, err := db.Query(ctx, disputesByDeadline, merchantID, after, f.Status, limit+1)
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (disputes.Dispute, error) { return scanDispute(r) })
		return err
	})
	if err != nil {
		return listing.Page[disputes.Dispute]{}, mapErr(err, "dispute")
	}
	page := listing.Page[disputes.Dispute]{Items: list, HasMore: len(list) > limit}
	if page.HasMore {
		page.Items = list[:limit]
	}
	if page.Items == nil {
		page.Items = []disputes.Dispute{}
	}
	return page, nil
}

// FinishDisputeTask implements disputes.Store.
func (s *Store) FinishDisputeTask(ctx context.Context, t outbox.Task) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM outbox WHERE task_id = $1`, t.ID())
	return mapErr(err, "dispute")
}
