package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

// staleTasks reads outbox rows with, for a delivery, its endpoint (the
// task's Key, which picks its queue).
const staleTasks = `SELECT o.task_type, o.ref_id::text, o.attempt, o.created_at, coalesce((SELECT d.endpoint_id::text
	FROM webhook_deliveries d WHERE o.task_type = '` + outbox.WebhookDeliver + `' AND d.id = o.ref_id), '')
FROM outbox o WHERE o.created_at < $1 ORDER BY o.created_at LIMIT $2`

// StaleTasks returns outbox rows older than before, oldest first: work whose
// task may have been lost and must be enqueued again.
func (s *Store) StaleTasks(ctx context.Context, before time.Time, limit int) ([]outbox.Pending, error) {
	rows, err := s.pool.Query(ctx, staleTasks, before, limit)
	if err != nil {
		return nil, mapErr(err, "task")
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Pending, error) {
		var p outbox.Pending
		err := r.Scan(&p.Task.Type, &p.Task.RefID, &p.Task.Attempt, &p.CreatedAt, &p.Task.Key)
		return p, err
	})
	return list, mapErr(err, "task")
}

// reconcile re-creates the task (ids and types as outbox.Task; a pending
// action is the capture or void of outbox.ChargeCapture and outbox.ChargeVoid) of any charge or refund that has waited for
// the worker longer than the cut-off without one, and the
// outbox.ChargeAuthenticate task of a charge whose cardholder answered or
// whose authentication expired (defence in depth: the task
// is written in the same transaction as the state that needs it).
const reconcile = `
WITH a AS (
	INSERT INTO outbox (task_id, task_type, ref_id)
	SELECT '` + outbox.ChargeAuthorize + `:' || id, '` + outbox.ChargeAuthorize + `', id FROM charges WHERE status = 'created' AND updated_at < $1
	ON CONFLICT DO NOTHING RETURNING 1
), c AS (
	INSERT INTO outbox (task_id, task_type, ref_id)
	SELECT 'charge:' || pending_action || ':' || id, 'charge:' || pending_action, id FROM charges
	WHERE pending_action IS NOT NULL AND status IN ('authorized', 'requires_action') AND updated_at < $1
	ON CONFLICT DO NOTHING RETURNING 1
), w AS (
	INSERT INTO outbox (task_id, task_type, ref_id)
	SELECT '` + outbox.ChargeAuthenticate + `:' || id, '` + outbox.ChargeAuthenticate + `', id FROM charges
	WHERE status = 'requires_action' AND pending_action IS NULL
		AND ((action_answer IS NOT NULL AND updated_at < $1) OR action_expires_at < now())
	ON CONFLICT DO NOTHING RETURNING 1
), r AS (
	INSERT INTO outbox (task_id, task_type, ref_id)
	SELECT '` + outbox.RefundProcess + `:' || id, '` + outbox.RefundProcess + `', id FROM refunds WHERE status = 'pending' AND updated_at < $1
		-- A refund a provider that settles by notification received waits
		-- for the notification, not for a task.
		AND NOT (provider_reference IS NOT NULL AND (SELECT c.provider FROM charges c WHERE c.id = refunds.charge_id) = ANY ($2::text[]))
	ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM c) + (SELECT count(*) FROM w) + (SELECT count(*) FROM r)`

// Reconcile re-creates missing tasks of work older than before and returns how many.
func (s *Store) Reconcile(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, reconcile, before, NotifiedProviders).Scan(&n)
	return n, mapErr(err, "task")
}

const deleteIdempotencyBefore = `DELETE FROM idempotency_keys WHERE created_at < $1`

// DeleteIdempotencyKeysBefore prunes idempotency records older than t.
func (s *Store) DeleteIdempotencyKeysBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, deleteIdempotencyBefore, t)
	return tag.RowsAffected(), mapErr(err, "idempotency key")
}
