package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

var (
	_ notifications.Store     = (*Store)(nil)
	_ notifications.WorkStore = (*Store)(nil)
)

const notificationColumns = `id::text, connector_id, merchant_id, provider, provider_event_id, dedup_key, type, payload,
outcome, charge_id::text, received_at, processed_at`

func scanNotification(row pgx.Row) (notifications.Notification, error) {
	var n notifications.Notification
	err := row.Scan(&n.ID, &n.ConnectorID, &n.MerchantID, &n.Provider, &n.ProviderEventID, &n.DedupKey, &n.Type, &n.Payload,
		&n.Outcome, &n.ChargeID, &n.ReceivedAt, &n.ProcessedAt)
	return n, err
}

// insertNotification stores the first notification of its dedup key; when
// the key is already stored it inserts nothing (the caller then stores the
// notification as a duplicate). A second sender of the same key waits on
// the unique index until the first commits.
const insertNotification = `INSERT INTO provider_notifications
	(id, connector_id, merchant_id, provider, provider_event_id, dedup_key, type, payload, outcome, received_at, processed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, $9, CASE WHEN $10 = 'received' THEN NULL ELSE $9::timestamptz END)
ON CONFLICT (connector_id, dedup_key) WHERE outcome <> 'duplicate' DO NOTHING`

const insertDuplicateNotification = `INSERT INTO provider_notifications
	(id, connector_id, merchant_id, provider, provider_event_id, dedup_key, type, payload, outcome, received_at, processed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'duplicate', $9, $9)`

// ReceiveNotifications implements notifications.Store.
func (s *Store) ReceiveNotifications(ctx context.Context, ns []notifications.Notification) ([]notifications.Notification, error) {
	out := make([]notifications.Notification, len(ns))
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i, n := range ns {
			first := notifications.OutcomeReceived
			if n.Outcome == notifications.OutcomeIgnored {
				first = notifications.OutcomeIgnored // a type nothing acts on: no task
			}
			tag, err := tx.Exec(ctx, insertNotification, n.ID, n.ConnectorID, n.MerchantID, n.Provider, n.ProviderEventID,
				n.DedupKey, n.Type, []byte(n.Payload), n.ReceivedAt, first)
			if err != nil {
				return mapErr(err, "notification")
			}
			switch {
			case tag.RowsAffected() == 1 && first == notifications.OutcomeIgnored:
				n.Outcome = first
				at := n.ReceivedAt
				n.ProcessedAt = &at
			case tag.RowsAffected() == 1:
				n.Outcome = notifications.OutcomeReceived
				t := notifications.ApplyTask(n.ID)
				if _, err := tx.Exec(ctx, insertOutbox, t.ID(), t.Type, n.ID); err != nil {
					return mapErr(err, "notification")
				}
			default:
				n.Outcome = notifications.OutcomeDuplicate
				at := n.ReceivedAt
				n.ProcessedAt = &at
				if _, err := tx.Exec(ctx, insertDuplicateNotification, n.ID, n.ConnectorID, n.MerchantID, n.Provider,
					n.ProviderEventID, n.DedupKey, n.Type, []byte(n.Payload), n.ReceivedAt); err != nil {
					return mapErr(err, "notification")
				}
			}
			out[i] = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListNotifications implements notifications.Store: newest first.
func (s *Store) ListNotifications(ctx context.Context, connectorID string, p listing.Params) (listing.Page[notifications.Notification], error) {
	query := `SELECT ` + notificationColumns + ` FROM provider_notifications WHERE connector_id = $1`
	return listPage(ctx, s, query, []any{connectorID}, p, scanNotification, "notification")
}

// NotificationForWork reads a stored notification for the worker.
func (s *Store) NotificationForWork(ctx context.Context, id string) (notifications.Notification, error) {
	n, err := scanNotification(s.pool.QueryRow(ctx, `SELECT `+notificationColumns+` FROM provider_notifications WHERE id = $1`, id))
	return n, mapErr(err, "notification")
}

// finishNotification records the outcome of a notification still waiting
// for the worker and deletes its task's outbox row; a notification already
// finished is left as it is.
const finishNotification = `WITH done AS (
	UPDATE provider_notifications SET outcome = $2, charge_id = $3::uuid, processed_at = $4
	WHERE id = $1 AND outcome = 'received'
	RETURNING id
)
DELETE FROM outbox WHERE task_id = $5`

// FinishNotification records what applying the notification did.
func (s *Store) FinishNotification(ctx context.Context, id, outcome string, chargeID *string, at time.Time) error {
	_, err := s.pool.Exec(ctx, finishNotification, id, outcome, chargeID, at, notifications.ApplyTask(id).ID())
	return mapErr(err, "notification")
}

// paymentByReference reads the merchant's charge with the provider
// reference and the outbox rows of the work in flight on it and on its
// pending refunds (by their task ids, the outbox's key).
const paymentByReference = `SELECT c.id::text, coalesce((
	SELECT array_agg(o.task_type || ' ' || o.ref_id::text || ' ' || o.attempt ORDER BY o.task_id) FROM outbox o
	WHERE o.task_id = ANY (ARRAY[
		'` + outbox.ChargeAuthorize + `:' || c.id, '` + outbox.ChargeCapture + `:' || c.id, '` + outbox.ChargeVoid + `:' || c.id,
		'` + outbox.ChargeReverse + `:' || c.id, '` + outbox.ChargeAuthenticate + `:' || c.id]
		|| ARRAY(SELECT '` + outbox.RefundProcess + `:' || r.id FROM refunds r WHERE r.charge_id = c.id AND r.status = 'pending'))), '{}')
FROM charges c WHERE c.provider_reference = $1 AND c.merchant_id = $2
ORDER BY c.id LIMIT 1`

// PaymentByReference implements notifications.WorkStore.
func (s *Store) PaymentByReference(ctx context.Context, merchantID, reference string) (p notifications.Payment, found bool, err error) {
	var rows []string
	err = s.pool.QueryRow(ctx, paymentByReference, reference, merchantID).Scan(&p.ChargeID, &rows)
	if errors.Is(err, pgx.ErrNoRows) {
		return notifications.Payment{}, false, nil
	}
	if err != nil {
		return notifications.Payment{}, false, mapErr(err, "charge")
	}
	for _, r := range rows {
		f := strings.Fields(r)
		if len(f) != 3 {
			continue
		}
		attempt, _ := strconv.Atoi(f[2])
		p.InFlight = append(p.InFlight, outbox.Task{Type: f[0], RefID: f[1], Attempt: attempt})
	}
	return p, true, nil
}

// RefundOfCharge implements notifications.WorkStore.
func (s *Store) RefundOfCharge(ctx context.Context, refundID, chargeID string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM refunds WHERE id = $1::uuid AND charge_id = $2::uuid)`, refundID, chargeID).Scan(&ok)
	return ok, mapErr(err, "refund")
}

// pruneNotifications deletes a batch of the notifications received before
// $1 that the worker is done with.
const pruneNotifications = `DELETE FROM provider_notifications WHERE id IN (
	SELECT id FROM provider_notifications WHERE received_at < $1 AND outcome <> 'received' LIMIT $2)`

// PruneNotifications implements jobs.Maintenance: in batches, so no
// statement holds many rows at once.
func (s *Store) PruneNotifications(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, pruneNotifications, before, batchMax*50)
		if err != nil {
			return total, mapErr(err, "notification")
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < batchMax*50 {
			return total, nil
		}
	}
}
