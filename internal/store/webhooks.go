package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// fanout follows a CTE named ev that inserted events (RETURNING
// eventReturning): it writes one delivery per endpoint of the merchant and
// environment subscribed to the event's type (deleted ones excepted), and
// one outbox task per event with a delivery to an enabled endpoint
// (webhook:event, which makes every first attempt), in the same statement
// and so the same transaction as the event. A disabled endpoint's delivery
// is failed at once and never sent: it waits in the log for a recover once
// the endpoint is enabled again. An endpoint whose filter turns the event
// away gets a 'filtered' delivery, never sent, so the decision is made once,
// here, and counted in the endpoint's log. The statement's result names the
// events with pending deliveries (dl).
const fanout = `
, dl AS (` + fanoutDeliveries + `
	RETURNING id, event_id, status` + fanoutTasks

// fanoutTasks closes fanout's dl and writes the outbox rows.
const fanoutTasks = `
), dlob AS (
	INSERT INTO outbox (task_id, task_type, ref_id)
	SELECT DISTINCT '` + outbox.WebhookEvent + `:' || dl.event_id, '` + outbox.WebhookEvent + `', dl.event_id FROM dl WHERE dl.status = 'pending'
)`

// fanoutDeliveries is fanout's INSERT of deliveries, without its RETURNING;
// an operational event's fanout adds a condition to it (insertEndpointEvent).
const fanoutDeliveries = `
	INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, status, next_attempt_at, created_at, updated_at,
		sequence, ordered_object)
	SELECT gh_uuid_v7(), we.id, we.merchant_id, ev.id, ev.type,
		CASE WHEN NOT m.pass THEN 'filtered' WHEN we.active THEN 'pending' ELSE 'failed' END,
		CASE WHEN m.pass AND we.active THEN ev.created_at END, ev.created_at, ev.created_at,
		ev.sequence, CASE WHEN m.pass AND we.ordered THEN ev.object_id END
	FROM ev JOIN webhook_endpoints we ON we.merchant_id = ev.merchant_id AND we.environment = ev.environment
		AND we.deleted_at IS NULL AND ev.type = ANY (we.events)
	CROSS JOIN LATERAL (SELECT we.filter IS NULL OR gh_webhook_filter_match(we.filter, ev.body::jsonb) AS pass) m`

// insertDeliverTasks, followed by a relation named d with an id column,
// writes the outbox row of each delivery: task id and type as outbox.Task.
const insertDeliverTasks = `INSERT INTO outbox (task_id, task_type, ref_id) SELECT '` + outbox.WebhookDeliver + `:' || d.id, '` +
	outbox.WebhookDeliver + `', d.id FROM`

// deliveriesOf is the select-list item naming the events whose deliveries
// fanout wrote (see deliveryTasks).
const deliveriesOf = `(SELECT coalesce(array_agg(DISTINCT event_id::text), '{}') FROM dl WHERE status = 'pending')`

// deliveryTasks are the tasks of the events named by deliveriesOf.
func deliveryTasks(events []string) []outbox.Task {
	tasks := make([]outbox.Task, 0, len(events))
	for _, id := range events {
		tasks = append(tasks, webhooks.EventTask(id))
	}
	return tasks
}

// eventReturning is what an events INSERT returns for fanout.
const eventReturning = `id, merchant_id, environment, type, created_at, object_id, sequence, body`

// insertEventFanout writes one event of a refund ($8) or of its charge ($7),
// numbered by the object's counter, and its deliveries. Both objects' rows
// are locked by the caller's transaction, so the numbers follow commit order.
const insertEventFanout = `
WITH cseq AS (
	UPDATE charges SET event_seq = event_seq + 1 WHERE id = $7::uuid AND $8::uuid IS NULL RETURNING event_seq
), rseq AS (
	UPDATE refunds SET event_seq = event_seq + 1 WHERE id = $8::uuid RETURNING event_seq
), ev AS (
	INSERT INTO events (id, merchant_id, environment, type, body, created_at, charge_id, object_id, sequence)
	VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::uuid, $7::uuid), (SELECT event_seq FROM cseq UNION ALL SELECT event_seq FROM rseq))
	RETURNING ` + eventReturning + `
)` + fanout + `
SELECT ` + deliveriesOf

// writeEvent writes an event of refund r: a refund event (refund.*), or an
// event of its charge.
func (s *Store) writeEvent(ctx context.Context, tx pgx.Tx, r refunds.Refund, e events.Event) ([]outbox.Task, error) {
	var refundID *string
	if strings.HasPrefix(e.Type, "refund.") {
		refundID = &r.ID
	}
	var ids []string
	if err := tx.QueryRow(ctx, insertEventFanout, e.ID, e.MerchantID, e.Environment, e.Type, e.Body, e.CreatedAt, r.ChargeID, refundID).Scan(&ids); err != nil {
		return nil, mapErr(err, "event")
	}
	return deliveryTasks(ids), nil
}

const endpointColumns = `id, merchant_id, environment, url, events, active, description, secret_sealed,
previous_secret_sealed, previous_secret_until, created_at, updated_at, deleted_at, disabled_reason, disabled_at, failing_since, ordered, filter, health_announced,
auth, auth_secret_sealed, header_names, headers_sealed`

// endpointDest is where a row of endpointColumns goes.
func endpointDest(e *webhooks.Endpoint) []any {
	return []any{&e.ID, &e.MerchantID, &e.Environment, &e.URL, &e.Events, &e.Active, &e.Description, &e.SecretSealed,
		&e.PreviousSecretSealed, &e.PreviousSecretUntil, &e.CreatedAt, &e.UpdatedAt, &e.DeletedAt,
		&e.DisabledReason, &e.DisabledAt, &e.FailingSince, &e.Ordered, &e.Filter, &e.HealthAnnounced,
		&e.Auth, &e.AuthSecretSealed, &e.HeaderNames, &e.HeadersSealed}
}

func scanEndpoint(row pgx.Row) (webhooks.Endpoint, error) {
	var e webhooks.Endpoint
	err := row.Scan(endpointDest(&e)...)
	return e, err
}

const insertEndpoint = `INSERT INTO webhook_endpoints (` + endpointColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL, $9, $9, NULL, NULL, NULL, NULL, $10, $11, false,
	$12, $13, $14, $15)`

const selectEndpoint = `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL`

// EndpointByID returns one of the merchant's endpoints or NotFound.
func (s *Store) EndpointByID(ctx context.Context, merchantID, id string) (webhooks.Endpoint, error) {
	e, err := scanEndpoint(s.pool.QueryRow(ctx, selectEndpoint, id, merchantID))
	return e, mapErr(err, "webhook_endpoint")
}

// ListEndpoints returns a page of the merchant's endpoints, newest first.
func (s *Store) ListEndpoints(ctx context.Context, merchantID string, p listing.Params) (listing.Page[webhooks.Endpoint], error) {
	return listPage(ctx, s, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE merchant_id = $1 AND deleted_at IS NULL`,
		[]any{merchantID}, p, scanEndpoint, "webhook_endpoint")
}

// updateEndpoint applies a patch. Switching active off by hand records
// 'manual' (an endpoint already off keeps the reason it had); switching it
// on clears the reason and the failing streak.
const updateEndpoint = `UPDATE webhook_endpoints SET url = coalesce($3, url), events = coalesce($4, events),
active = coalesce($5, active), description = coalesce($6, description), updated_at = $7, ordered = coalesce($8, ordered),
disabled_reason = CASE WHEN $5::bool IS NULL THEN disabled_reason WHEN $5 THEN NULL
	WHEN active THEN 'manual' ELSE coalesce(disabled_reason, 'manual') END,
disabled_at = CASE WHEN $5::bool IS NULL THEN disabled_at WHEN $5 THEN NULL
	WHEN active THEN $7 ELSE coalesce(disabled_at, $7) END,
failing_since = CASE WHEN $5::bool THEN NULL ELSE failing_since END,
filter = CASE WHEN $9 THEN $10::jsonb ELSE filter END,
auth = CASE WHEN $11 THEN $12::jsonb ELSE auth END,
auth_secret_sealed = CASE WHEN $11 THEN $13::bytea ELSE auth_secret_sealed END,
header_names = CASE WHEN $14 THEN $15::text[] ELSE header_names END,
headers_sealed = CASE WHEN $14 THEN $16::bytea ELSE headers_sealed END
WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL RETURNING ` + endpointColumns

// Endpoint health changes an attempt calls for (webhooks.Health), each
// conditional so that concurrent attempts settle on one answer. All but the
// start of a streak return the endpoint as it is after the change, its
// event_seq, and whether an operational event tells of it: disabling and
// announcing a failing endpoint always do, and mark the trouble announced;
// ending a streak does when its trouble was announced.
const (
	startFailing = `UPDATE webhook_endpoints SET failing_since = $2
WHERE id = $1 AND failing_since IS NULL AND active AND deleted_at IS NULL`
	endFailing = `UPDATE webhook_endpoints w SET failing_since = NULL, health_announced = false,
	event_seq = w.event_seq + CASE WHEN o.announced AND w.deleted_at IS NULL THEN 1 ELSE 0 END
FROM (SELECT health_announced AS announced FROM webhook_endpoints WHERE id = $1 FOR UPDATE) o
WHERE w.id = $1 AND (w.failing_since IS NOT NULL OR w.health_announced)
RETURNING ` + endpointColumns + `, event_seq, o.announced AND w.deleted_at IS NULL`
	disableGone = `UPDATE webhook_endpoints SET active = false, disabled_reason = 'gone', disabled_at = $2, updated_at = $2,
	health_announced = true, event_seq = event_seq + 1
WHERE id = $1 AND active AND deleted_at IS NULL RETURNING ` + endpointColumns + `, event_seq, true`
	disableFailing = `UPDATE webhook_endpoints SET active = false, disabled_reason = 'failing', disabled_at = $2, updated_at = $2,
	health_announced = true, event_seq = event_seq + 1
WHERE id = $1 AND active AND deleted_at IS NULL AND failing_since <= $3 RETURNING ` + endpointColumns + `, event_seq, true`
	announceFailing = `UPDATE webhook_endpoints SET health_announced = true, event_seq = event_seq + 1
WHERE id = $1 AND active AND deleted_at IS NULL AND NOT health_announced AND failing_since <= $2
RETURNING ` + endpointColumns + `, event_seq, true`
)

// insertEndpointEvent writes an operational event about endpoint $7,
// numbered $8 by the endpoint's counter, and its deliveries to the
// merchant's other endpoints: never to the one it is about. It has no
// charge (the nil UUID, as payouts).
const insertEndpointEvent = `
WITH ev AS (
	INSERT INTO events (id, merchant_id, environment, type, body, created_at, charge_id, object_id, sequence)
	VALUES ($1, $2, $3, $4, $5, $6, '00000000-0000-0000-0000-000000000000', NULL, $8)
	RETURNING ` + eventReturning + `
), dl AS (` + fanoutDeliveries + `
	WHERE we.id <> $7
	RETURNING id, event_id, status` + fanoutTasks + `
SELECT ` + deliveriesOf

// earlierPending finds the earliest next attempt among an ordered delivery's
// predecessors still pending: the same endpoint's deliveries of the same
// object with a lower sequence (webhook_deliveries_ordered_idx).
const earlierPending = `SELECT count(*), min(next_attempt_at) FROM webhook_deliveries
WHERE endpoint_id = $1 AND ordered_object = $2::uuid AND sequence < $3 AND status = 'pending'`

// postponeDelivery moves a waiting delivery's next attempt, if no attempt
// was recorded meanwhile; it is not an attempt.
const postponeDelivery = `UPDATE webhook_deliveries SET next_attempt_at = $3
WHERE id = $1 AND status = 'pending' AND attempts = $2`

// WaitInOrder implements webhooks.Store.
func (s *Store) WaitInOrder(ctx context.Context, d webhooks.Delivery, until func(earliest *time.Time) time.Time) (bool, time.Time, error) {
	if d.OrderedObject == nil || d.Sequence <= 1 {
		return false, time.Time{}, nil
	}
	var n int
	var earliest *time.Time
	if err := s.pool.QueryRow(ctx, earlierPending, d.EndpointID, *d.OrderedObject, d.Sequence).Scan(&n, &earliest); err != nil {
		return false, time.Time{}, mapErr(err, "webhook_delivery")
	}
	if n == 0 {
		return false, time.Time{}, nil
	}
	at := until(earliest)
	if _, err := s.pool.Exec(ctx, postponeDelivery, d.ID, d.Attempts, at); err != nil {
		return false, time.Time{}, mapErr(err, "webhook_delivery")
	}
	return true, at, nil
}

const failingUnannounced = `SELECT id FROM webhook_endpoints
WHERE failing_since <= $1 AND NOT health_announced AND active AND deleted_at IS NULL
ORDER BY failing_since LIMIT $2`

// FailingUnannounced implements webhooks.Store (webhook_endpoints_failing_idx).
func (s *Store) FailingUnannounced(ctx context.Context, before time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, failingUnannounced, before, limit)
	if err != nil {
		return nil, mapErr(err, "webhook_endpoint")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, mapErr(err, "webhook_endpoint")
}

// UpdateHealth implements webhooks.Store: the change and the operational
// event that tells of it, in one transaction.
func (s *Store) UpdateHealth(ctx context.Context, h webhooks.Health) (webhooks.HealthResult, error) {
	var res webhooks.HealthResult
	var query, typ string
	args := []any{h.EndpointID, h.At}
	switch {
	case h.Disable == webhooks.DisabledGone:
		query, typ = disableGone, events.EndpointDisabled
	case h.Disable == webhooks.DisabledFailing:
		query, typ, args = disableFailing, events.EndpointDisabled, append(args, h.FailingBefore)
	case h.Announce:
		query, typ, args = announceFailing, events.EndpointFailing, []any{h.EndpointID, h.FailingBefore}
	case h.Failing:
		_, err := s.pool.Exec(ctx, startFailing, args...)
		return res, mapErr(err, "webhook_endpoint")
	case h.Recovered:
		query, typ, args = endFailing, events.EndpointRecovered, args[:1]
	default:
		return res, nil
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var e webhooks.Endpoint
		var seq int
		var tell bool
		err := tx.QueryRow(ctx, query, args...).Scan(append(endpointDest(&e), &seq, &tell)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // already changed, off, deleted or recovered meanwhile
		}
		if err != nil {
			return mapErr(err, "webhook_endpoint")
		}
		res.Disabled = h.Disable != ""
		if !tell {
			return nil
		}
		ev, err := events.NewEndpoint(ids.NewUUID(), e.MerchantID, e.Environment, typ, h.At, e.View())
		if err != nil {
			return err
		}
		var evs []string
		if err := tx.QueryRow(ctx, insertEndpointEvent, ev.ID, ev.MerchantID, ev.Environment, ev.Type, ev.Body, ev.CreatedAt,
			e.ID, seq).Scan(&evs); err != nil {
			return mapErr(err, "event")
		}
		res.Event, res.Tasks = ev.Type, deliveryTasks(evs)
		return nil
	})
	if err != nil {
		return webhooks.HealthResult{}, err
	}
	return res, nil
}

// UpdateEndpoint applies a patch.
func (s *Store) UpdateEndpoint(ctx context.Context, merchantID, id string, p webhooks.Patch) (webhooks.Endpoint, error) {
	var evs []string
	if p.Events != nil {
		evs = p.Events
	}
	var e webhooks.Endpoint
	err := s.audited(ctx, func(q dbtx) (err error) {
		e, err = scanEndpoint(q.QueryRow(ctx, updateEndpoint, id, merchantID, p.URL, evs, p.Active, p.Description, p.At, p.Ordered,
			p.SetFilter, p.Filter, p.SetAuth, p.Auth, p.AuthSecretSealed, p.SetHeaders, p.HeaderNames, p.HeadersSealed))
		return mapErr(err, "webhook_endpoint")
	})
	return e, err
}

const deleteEndpoint = `UPDATE webhook_endpoints SET deleted_at = $3, active = false, updated_at = $3
WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL`

// DeleteEndpoint removes an endpoint (kept for its delivery log).
func (s *Store) DeleteEndpoint(ctx context.Context, merchantID, id string, at time.Time) error {
	return s.audited(ctx, func(q dbtx) error {
		tag, err := q.Exec(ctx, deleteEndpoint, id, merchantID, at)
		if err != nil {
			return mapErr(err, "webhook_endpoint")
		}
		if tag.RowsAffected() == 0 {
			return apperr.NotFound("webhook_endpoint")
		}
		return nil
	})
}

const rotateSecret = `UPDATE webhook_endpoints SET secret_sealed = $3, previous_secret_sealed = $4,
previous_secret_until = $5, updated_at = $6 WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL
RETURNING ` + endpointColumns

// RotateSecret replaces the secret, keeping the previous one until until.
func (s *Store) RotateSecret(ctx context.Context, merchantID, id string, sealed, previous []byte, until, at time.Time) (webhooks.Endpoint, error) {
	var e webhooks.Endpoint
	err := s.audited(ctx, func(q dbtx) (err error) {
		e, err = scanEndpoint(q.QueryRow(ctx, rotateSecret, id, merchantID, sealed, previous, until, at))
		return mapErr(err, "webhook_endpoint")
	})
	return e, err
}

const deliveryColumns = `id, endpoint_id, merchant_id, event_id, event_type, test_body IS NOT NULL, status, attempts,
chain_attempts, next_attempt_at, created_at, updated_at, coalesce(sequence, 0), ordered_object::text`

func scanDelivery(row pgx.Row, extra ...any) (webhooks.Delivery, error) {
	var d webhooks.Delivery
	err := row.Scan(append([]any{&d.ID, &d.EndpointID, &d.MerchantID, &d.EventID, &d.EventType, &d.Test, &d.Status,
		&d.Attempts, &d.ChainAttempts, &d.NextAttemptAt, &d.CreatedAt, &d.UpdatedAt, &d.Sequence, &d.OrderedObject}, extra...)...)
	return d, err
}

const insertTestDelivery = `
WITH d AS (
	INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, test_body, status, next_attempt_at, created_at, updated_at, sequence)
	VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7, $7, 1) RETURNING id
)
` + insertDeliverTasks + ` d`

// CreateTestDelivery stores a test delivery with its own body and its task.
func (s *Store) CreateTestDelivery(ctx context.Context, d webhooks.Delivery, body []byte) (outbox.Task, error) {
	err := s.audited(ctx, func(q dbtx) error {
		_, err := q.Exec(ctx, insertTestDelivery, d.ID, d.EndpointID, d.MerchantID, d.EventID, d.EventType, body, d.CreatedAt)
		return mapErr(err, "webhook_delivery")
	})
	return webhooks.TaskTo(d.ID, d.EndpointID), err
}

const attemptColumns = `attempt, started_at, duration_ms, status_code, error, response_body`

func (s *Store) attemptsOf(ctx context.Context, ds []webhooks.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	idx := map[string]int{}
	ids := make([]string, len(ds))
	for i, d := range ds {
		idx[d.ID], ids[i] = i, d.ID
	}
	rows, err := s.pool.Query(ctx, `SELECT delivery_id::text, `+attemptColumns+` FROM webhook_attempts WHERE delivery_id = ANY($1::uuid[]) ORDER BY delivery_id, attempt`, ids)
	if err != nil {
		return mapErr(err, "webhook_attempt")
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a webhooks.Attempt
		if err := rows.Scan(&id, &a.Attempt, &a.StartedAt, &a.DurationMS, &a.StatusCode, &a.Error, &a.ResponseBody); err != nil {
			return mapErr(err, "webhook_attempt")
		}
		ds[idx[id]].Log = append(ds[idx[id]].Log, a)
	}
	return mapErr(rows.Err(), "webhook_attempt")
}

// ListDeliveries returns a page of an endpoint's deliveries with their attempts.
func (s *Store) ListDeliveries(ctx context.Context, merchantID, endpointID, status string, p listing.Params) (listing.Page[webhooks.Delivery], error) {
	query := `SELECT ` + deliveryColumns + ` FROM webhook_deliveries WHERE merchant_id = $1 AND endpoint_id = $2`
	args := []any{merchantID, endpointID}
	if status != "" {
		args = append(args, status)
		query += ` AND status = $3`
	}
	page, err := listPage(ctx, s, query, args, p, func(r pgx.Row) (webhooks.Delivery, error) { return scanDelivery(r) }, "webhook_delivery")
	if err != nil {
		return page, err
	}
	return page, s.attemptsOf(ctx, page.Items)
}

const selectDelivery = `SELECT ` + deliveryColumns + ` FROM webhook_deliveries WHERE id = $1 AND merchant_id = $2`

const endpointStats = `SELECT
	count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'filtered'),
	count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'pending')
FROM webhook_deliveries WHERE endpoint_id = $1 AND test_body IS NULL`

// EndpointStats implements webhooks.Store.
func (s *Store) EndpointStats(ctx context.Context, endpointID string) (webhooks.Stats, error) {
	st := webhooks.Stats{EndpointID: endpointID}
	err := s.pool.QueryRow(ctx, endpointStats, endpointID).Scan(&st.Delivered, &st.Filtered, &st.Failed, &st.Pending)
	return st, mapErr(err, "webhook_endpoint")
}

// DeliveryByID returns one of the merchant's deliveries with its attempts.
func (s *Store) DeliveryByID(ctx context.Context, merchantID, id string) (webhooks.Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, selectDelivery, id, merchantID))
	if err != nil {
		return d, mapErr(err, "webhook_delivery")
	}
	list := []webhooks.Delivery{d}
	err = s.attemptsOf(ctx, list)
	return list[0], err
}

const retryDelivery = `
WITH d AS (
	UPDATE webhook_deliveries SET status = 'pending', chain_attempts = 0, next_attempt_at = $3, updated_at = $3
	WHERE id = $1 AND merchant_id = $2 AND status = 'failed'
	RETURNING id
), ob AS (
	` + insertDeliverTasks + ` d
	ON CONFLICT DO NOTHING
)
SELECT count(*) FROM d`

// RetryDelivery starts a new attempt chain for a failed delivery.
func (s *Store) RetryDelivery(ctx context.Context, merchantID, id string, at time.Time) (webhooks.Delivery, outbox.Task, error) {
	var n int
	err := s.audited(ctx, func(q dbtx) error {
		if err := q.QueryRow(ctx, retryDelivery, id, merchantID, at).Scan(&n); err != nil {
			return mapErr(err, "webhook_delivery")
		}
		if n == 0 {
			return errNothingDone // nothing retried: no audit entry either
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNothingDone) {
		return webhooks.Delivery{}, outbox.Task{}, err
	}
	d, err := s.DeliveryByID(ctx, merchantID, id)
	if err != nil {
		return d, outbox.Task{}, err
	}
	if n == 0 {
		return d, outbox.Task{}, &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeInvalidState,
			Message: "Only a failed delivery can be retried; this one is " + d.Status + "."}
	}
	return d, webhooks.TaskTo(id, d.EndpointID), nil
}

const (
	countFailed       = `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND merchant_id = $2 AND status = 'failed' AND created_at >= $3`
	recoverDeliveries = `
WITH d AS (
	UPDATE webhook_deliveries SET status = 'pending', chain_attempts = 0, next_attempt_at = $4, updated_at = $4
	WHERE endpoint_id = $1 AND merchant_id = $2 AND status = 'failed' AND created_at >= $3
	RETURNING id
), ob AS (
	` + insertDeliverTasks + ` d
	ON CONFLICT DO NOTHING
)
SELECT coalesce(array_agg(id::text), '{}') FROM d`
)

// RecoverDeliveries re-sends (or, dry, counts) an endpoint's failed deliveries created since since.
func (s *Store) RecoverDeliveries(ctx context.Context, merchantID, endpointID string, since time.Time, dryRun bool, at time.Time) (int64, []outbox.Task, error) {
	if dryRun {
		audit.Skip(ctx) // a count changes nothing
		var n int64
		err := s.pool.QueryRow(ctx, countFailed, endpointID, merchantID, since).Scan(&n)
		return n, nil, mapErr(err, "webhook_delivery")
	}
	var ids []string
	if err := s.audited(ctx, func(q dbtx) error {
		return mapErr(q.QueryRow(ctx, recoverDeliveries, endpointID, merchantID, since, at).Scan(&ids), "webhook_delivery")
	}); err != nil {
		return 0, nil, err
	}
	tasks := make([]outbox.Task, 0, len(ids))
	for _, id := range ids {
		tasks = append(tasks, webhooks.TaskTo(id, endpointID))
	}
	return int64(len(ids)), tasks, nil
}

// workColumns are a delivery's columns, the body to send and its endpoint's
// (even if deleted), read by scanWork: selectDeliveriesForWork and
// selectEventFirsts read deliveries for their attempts in one round trip.
const workColumns = `SELECT d.id, d.endpoint_id, d.merchant_id, d.event_id, d.event_type, d.test_body IS NOT NULL,
	d.status, d.attempts, d.chain_attempts, d.next_attempt_at, d.created_at, d.updated_at, coalesce(d.sequence, 0), d.ordered_object::text,
	coalesce(d.test_body::text, (SELECT e.body::text FROM events e WHERE e.id = d.event_id)),
	w.id, w.merchant_id, w.environment, w.url, w.events, w.active, w.description, w.secret_sealed,
	w.previous_secret_sealed, w.previous_secret_until, w.created_at, w.updated_at, w.deleted_at,
	w.disabled_reason, w.disabled_at, w.failing_since, w.ordered, w.filter, w.health_announced,
	w.auth, w.auth_secret_sealed, w.header_names, w.headers_sealed`

// selectDeliveriesForWork reads deliveries by id.
const selectDeliveriesForWork = workColumns + `
FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id WHERE d.id = ANY($1::uuid[])`

// selectEventFirsts reads, for a batch of events, the deliveries still
// waiting for their first attempt: pending, no attempt, not handed off to a
// task of their own. An event's deliveries were written with or after it,
// so their ids (the partition key, time-ordered) are at least $2, a day
// before the oldest event's own id: the partitions of older deliveries are
// not read. It runs on the batch pool, with a generic plan made once per
// session; the lateral subquery, kept apart by OFFSET 0, makes that plan
// find each event's deliveries by the event's index, however small the
// table was when it was made. (Flattened, with event_id = ANY($1), the
// plan may scan the key's index from $2 on: every delivery of the day.)
const selectEventFirsts = workColumns + `
FROM unnest($1::uuid[]) AS ev(id) CROSS JOIN LATERAL (
	SELECT * FROM webhook_deliveries d
	WHERE d.event_id = ev.id AND d.id >= $2::uuid AND d.status = 'pending' AND d.attempts = 0 AND d.test_body IS NULL
		AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = '` + outbox.WebhookDeliver + `:' || d.id)
	OFFSET 0
) d JOIN webhook_endpoints w ON w.id = d.endpoint_id`

func scanWork(rows pgx.CollectableRow) (webhooks.Work, error) {
	var w webhooks.Work
	var body *string
	var err error
	w.Delivery, err = scanDelivery(rows, append([]any{&body}, endpointDest(&w.Endpoint)...)...)
	if body != nil { // nil: the event was pruned and the delivery can only fail
		w.Body = []byte(*body)
	}
	return w, err
}

// work is one delivery as the worker needs it, or why it is not there.
type work struct {
	webhooks.Work
	err error
}

// DeliveryForWork returns a delivery, its endpoint (even if deleted) and the
// body to send, nil when the event was pruned. Calls made at the same time
// share one query (see batcher).
func (s *Store) DeliveryForWork(ctx context.Context, id string) (webhooks.Delivery, webhooks.Endpoint, []byte, error) {
	w, err := s.batches.work.do(ctx, id)
	if err == nil {
		err = w.err
	}
	return w.Delivery, w.Endpoint, w.Body, err
}

func (s *Store) deliveriesForWork(ctx context.Context, ids []string) ([]work, error) {
	rows, err := s.batches.pool.Query(ctx, selectDeliveriesForWork, ids)
	if err != nil {
		return nil, mapErr(err, "webhook_delivery")
	}
	found, err := pgx.CollectRows(rows, scanWork)
	if err != nil {
		return nil, mapErr(err, "webhook_delivery")
	}
	byID := make(map[string]webhooks.Work, len(found))
	for _, w := range found {
		byID[w.Delivery.ID] = w
	}
	out := make([]work, len(ids))
	for i, id := range ids {
		w, ok := byID[strings.ToLower(id)]
		out[i] = work{Work: w}
		if !ok {
			out[i].err = apperr.NotFound("webhook_delivery")
		}
	}
	return out, nil
}

// EventFirsts implements webhooks.Store. Calls made at the same time share
// one query (see batcher).
func (s *Store) EventFirsts(ctx context.Context, eventID string) ([]webhooks.Work, error) {
	return s.batches.events.do(ctx, eventID)
}

func (s *Store) eventFirsts(ctx context.Context, events []string) ([][]webhooks.Work, error) {
	floor := ""
	for _, id := range events {
		// Canonical UUIDs order as text as they do as UUIDs.
		if f := idFloor(id, 24*time.Hour); floor == "" || f < floor {
			floor = f
		}
	}
	rows, err := s.batches.pool.Query(ctx, selectEventFirsts, events, floor)
	if err != nil {
		return nil, mapErr(err, "webhook_delivery")
	}
	found, err := pgx.CollectRows(rows, scanWork)
	if err != nil {
		return nil, mapErr(err, "webhook_delivery")
	}
	byEvent := make(map[string][]webhooks.Work, len(events))
	slices.SortFunc(found, func(a, b webhooks.Work) int { return strings.Compare(a.Delivery.ID, b.Delivery.ID) })
	for _, w := range found { // oldest first
		byEvent[w.Delivery.EventID] = append(byEvent[w.Delivery.EventID], w)
	}
	out := make([][]webhooks.Work, len(events))
	for i, id := range events {
		out[i] = byEvent[strings.ToLower(id)]
	}
	return out, nil
}

// idFloor is the least time-ordered (version 7) UUID of the millisecond
// back before id's own, for a bound on a partition key; the nil UUID, no
// bound, for an id that is not a version 7 UUID. The day's margin covers
// any clock difference between the process that made id and the database.
func idFloor(id string, back time.Duration) string {
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 {
		return uuid.Nil.String()
	}
	floor := time.Unix(u.Time().UnixTime()).Add(-back)
	if floor.Before(time.UnixMilli(0)) {
		return uuid.Nil.String()
	}
	return uuidFloor(floor)
}

// finishEvent hands deliveries off to tasks of their own (their outbox
// rows) and deletes the event's task, in one statement. Like the attempt
// records before it, it commits without waiting for the WAL to reach the
// disk (synchronous_commit off, for this transaction only): WAL is one
// sequence, so a crash that loses it loses every later write of these
// deliveries too, and the event's task, still in the outbox, runs again
// and attempts (again) those without an attempt or a task of their own;
// at-least-once delivery allows it. The next durable commit of any
// transaction makes it durable.
const finishEvent = `
WITH h AS (
	` + insertDeliverTasks + ` (SELECT unnest($2::uuid[]) AS id) d
	ON CONFLICT DO NOTHING
), done AS (
	DELETE FROM outbox WHERE task_id = '` + outbox.WebhookEvent + `:' || $1::text
)
SELECT set_config('synchronous_commit', 'off', true)`

// FinishEvent implements webhooks.Store.
func (s *Store) FinishEvent(ctx context.Context, eventID string, handOff []string) error {
	var async string
	err := s.pool.QueryRow(ctx, finishEvent, eventID, handOff).Scan(&async)
	return mapErr(err, "webhook_delivery")
}

// recordAttempts applies a batch of attempts: each only if its delivery is
// still pending with attempt-1 attempts, so an attempt is recorded once. A
// first attempt its event's task made that calls for a retry also writes the
// delivery's own task (new_task), which carries the retries. It runs on
// the batch pool, whose sessions find the deliveries by their key's index
// however small the table was when they planned it (GenericPlans). It
// commits without waiting for the WAL to reach the disk (synchronous_commit
// off, for this transaction only): a crash may lose the last fraction of a
// second of attempts, and then those deliveries are sent again, which
// at-least-once delivery allows. Money and events are never written this way.
// (The event's task is deleted later by FinishEvent, also without waiting;
// a crash that loses an attempt loses that deletion too, since WAL is one
// sequence, and the event's task runs again.)
const recordAttempts = `
WITH r AS (
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::int[], $5::timestamptz[], $6::timestamptz[],
		$7::int[], $8::int[], $9::text[], $10::text[], $11::text[], $12::bool[])
		AS r (id, attempt, status, chain_attempts, next_attempt_at, started_at, duration_ms, status_code, error, response_body, done_task, new_task)
), d AS (
	UPDATE webhook_deliveries w SET status = r.status, attempts = r.attempt, chain_attempts = r.chain_attempts,
		next_attempt_at = r.next_attempt_at, updated_at = now()
	FROM r WHERE w.id = r.id AND w.status = 'pending' AND w.attempts = r.attempt - 1
	RETURNING w.id
), a AS (
	INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error, response_body)
	SELECT r.id, r.attempt, r.started_at, r.duration_ms, r.status_code, r.error, r.response_body FROM r JOIN d ON d.id = r.id
), ob AS (
	DELETE FROM outbox WHERE task_id = ANY (ARRAY(SELECT r.done_task FROM r JOIN d ON d.id = r.id WHERE r.done_task IS NOT NULL))
), nt AS (
	` + insertDeliverTasks + ` (SELECT r.id FROM r JOIN d ON d.id = r.id WHERE r.new_task) d
	ON CONFLICT DO NOTHING
)
SELECT set_config('synchronous_commit', 'off', true), coalesce((SELECT array_agg(id::text) FROM d), '{}')`

// RecordAttempt implements webhooks.Store. Calls made at the same time share
// one statement and one commit (see batcher and recordAttempts).
func (s *Store) RecordAttempt(ctx context.Context, r webhooks.AttemptRecord) (bool, error) {
	return s.batches.record.do(ctx, r)
}

func (s *Store) recordAttempts(ctx context.Context, rs []webhooks.AttemptRecord) ([]bool, error) {
	n := len(rs)
	var (
		ids, statuses           = make([]string, 0, n), make([]string, 0, n)
		attempts, chains, durs  = make([]int, 0, n), make([]int, 0, n), make([]int, 0, n)
		next                    = make([]*time.Time, 0, n)
		started                 = make([]time.Time, 0, n)
		codes                   = make([]*int, 0, n)
		errs, bodies, doneTasks = make([]*string, 0, n), make([]*string, 0, n), make([]*string, 0, n)
		newTasks                = make([]bool, 0, n)
	)
	first := make(map[string]int, n) // a delivery's first record in the batch; a repeat is not applied
	for i, r := range rs {
		if _, dup := first[r.DeliveryID]; dup {
			continue
		}
		first[r.DeliveryID] = i
		a := r.Attempt
		var done *string
		if r.DoneTask != "" {
			done = &r.DoneTask
		}
		ids, statuses = append(ids, r.DeliveryID), append(statuses, r.Status)
		attempts, chains, durs = append(attempts, a.Attempt), append(chains, r.ChainAttempts), append(durs, a.DurationMS)
		next, started, codes = append(next, r.NextAttemptAt), append(started, a.StartedAt), append(codes, a.StatusCode)
		errs, bodies, doneTasks = append(errs, a.Error), append(bodies, a.ResponseBody), append(doneTasks, done)
		newTasks = append(newTasks, r.NewTask)
	}
	var applied []string
	var ignored string
	err := s.batches.pool.QueryRow(ctx, recordAttempts, ids, attempts, statuses, chains, next, started, durs, codes, errs, bodies, doneTasks, newTasks).
		Scan(&ignored, &applied)
	if err != nil {
		return nil, mapErr(err, "webhook_delivery")
	}
	ok := make(map[string]bool, len(applied))
	for _, id := range applied {
		ok[id] = true
	}
	out := make([]bool, n)
	for i, r := range rs {
		out[i] = first[r.DeliveryID] == i && ok[r.DeliveryID]
	}
	return out, nil
}
