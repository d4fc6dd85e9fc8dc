package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

const chargeColumns = `id, merchant_id, environment, amount, amount_captured, amount_refunded, amount_refund_held,
currency, status, pending_action, capture_amount, payment_method, capture, card_brand, card_last4, card_exp_month,
card_exp_year, card_fingerprint, card_token, provider, provider_reference, description, metadata, failure_code,
failure_message, created_at, updated_at, customer_id, payment_method_id, off_session, return_url,
authentication_status, authentication_completed_at, next_action_url, action_expires_at, action_answer,
connector_id, route, attempts`

// scanCharge is the one mapping from a charges row (chargeColumns, plus any
// extra destinations) to a Charge.
func scanCharge(row pgx.Row, extra ...any) (charges.Charge, error) {
	var c charges.Charge
	dest := []any{&c.ID, &c.MerchantID, &c.Environment, &c.Amount, &c.AmountCaptured, &c.AmountRefunded, &c.AmountRefundHeld,
		&c.Currency, &c.Status, &c.PendingAction, &c.CaptureAmount, &c.PaymentMethod, &c.Capture, &c.Card.Brand, &c.Card.Last4,
		&c.Card.ExpMonth, &c.Card.ExpYear, &c.Card.Fingerprint, &c.CardToken, &c.Provider, &c.ProviderReference,
		&c.Description, &c.Metadata, &c.FailureCode, &c.FailureMessage, &c.CreatedAt, &c.UpdatedAt,
		&c.CustomerID, &c.PaymentMethodID, &c.OffSession, &c.ReturnURL, &c.Authentication.Status,
		&c.Authentication.CompletedAt, &c.Authentication.NextActionURL, &c.Authentication.ExpiresAt, &c.Authentication.Answer,
		&c.ConnectorID, &c.Route, &c.Attempts}
	err := row.Scan(append(dest, extra...)...)
	return c, err
}

// createCharge writes the idempotency record (if any), the charge, its event
// and its outbox task in one statement, so in one round trip and one
// transaction. With a used key nothing is written and no row comes back.
var createCharge = `
WITH idem AS (
	INSERT INTO idempotency_keys (merchant_id, key, fingerprint, status, response)
	SELECT $2::text, $25::text, $26::bytea, $27::int, $28::bytea WHERE $25::text IS NOT NULL
	ON CONFLICT (merchant_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
		response = EXCLUDED.response, created_at = now()
	WHERE idempotency_keys.created_at < ` + idempotencyCutoff + `
	RETURNING 1
), ch AS (
	INSERT INTO charges (id, merchant_id, environment, amount, currency, status, payment_method, capture,
		card_brand, card_last4, card_exp_month, card_exp_year, card_fingerprint, card_token, card_sealed,
		provider, description, metadata, created_at, updated_at, event_seq,
		customer_id, payment_method_id, off_session, return_url, connector_id, route)
	SELECT $1::uuid, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::bool, $9::text, $10::text,
		$11::int, $12::int, $13::text, $14::text, $15::bytea, $16::text, $17::text, $18::jsonb, $19::timestamptz, $19::timestamptz, 1,
		$29::text, $30::text, $31::bool, $32::text, $33::text, $34::jsonb
	WHERE $25::text IS NULL OR EXISTS (SELECT 1 FROM idem)
	RETURNING id
), ev AS (
	INSERT INTO events (id, merchant_id, environment, type, body, created_at, charge_id, object_id, sequence)
	SELECT $20::uuid, $2::text, $3::text, $21::text, $22::json, $19::timestamptz, ch.id, ch.id, 1 FROM ch
	RETURNING ` + eventReturning + `
), ob AS (
	INSERT INTO outbox (task_id, task_type, ref_id) SELECT $23::text, $24::text, ch.id FROM ch
)` + fanout + `
SELECT count(*), ` + deliveriesOf + ` FROM ch`

// createChargeAudited is createCharge that also appends the request's audit
// entry ($35 to $43: appendAudit's arguments but the merchant and the
// object) when it creates the charge, still in one statement and one round
// trip: the chain's head is locked from the append to the commit. A CTE
// that only reads runs when the query reads it: the result reads it.
var createChargeAudited = strings.Replace(createCharge, `
SELECT count(*), `, `
, au AS (
	SELECT audit_append($35, $2::text, $36, $37, $38, $39, $40, ch.id::text, $41, $42, $43) FROM ch
)
SELECT least(count(*), (SELECT count(*) FROM au)), `, 1)

// CreateCharge implements charges.Store.
func (s *Store) CreateCharge(ctx context.Context, n charges.NewCharge) (*idempotency.Response, []outbox.Task, error) {
	c := n.Charge
	var key *string
	var fp []byte
	var status int
	var resp []byte
	if n.Idem != nil {
		key, fp = &n.Idem.Key, n.Idem.Fingerprint
		status, resp = n.Response.Status, n.Response.Body
	}
	var created int
	var deliveries []string
	args := []any{c.ID, c.MerchantID, c.Environment, c.Amount, c.Currency, c.Status, c.PaymentMethod, c.Capture,
		c.Card.Brand, c.Card.Last4, c.Card.ExpMonth, c.Card.ExpYear, c.Card.Fingerprint, c.CardToken, n.Sealed,
		c.Provider, c.Description, c.Metadata, c.CreatedAt,
		n.Event.ID, n.Event.Type, n.Event.Body,
		n.Task.ID(), n.Task.Type,
		key, fp, status, resp,
		c.CustomerID, c.PaymentMethodID, c.OffSession, c.ReturnURL, c.ConnectorID, routeJSON(c.Route)}
	var err error
	audit.SetObject(ctx, "charge", c.ID)
	if n.TokenID == "" {
		err = s.createChargeAlone(ctx, args, &created, &deliveries)
	} else {
		// The charge and the use of its card token commit together: a
		// token another charge used meanwhile rolls this one back.
		err = s.inTx(ctx, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, createCharge, args...).Scan(&created, &deliveries); err != nil || created == 0 {
				if err == nil {
					audit.Skip(ctx) // a replay
				}
				return err
			}
			tag, err := tx.Exec(ctx, useToken, n.TokenID, c.MerchantID, c.Environment, c.CreatedAt, c.ID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return charges.ErrTokenUnusable()
			}
			return nil
		})
	}
	if err != nil {
		if n.Idem != nil && lockTimeout(err) {
			return nil, nil, idempotency.ErrInUse()
		}
		if _, ok := apperr.As(err); ok {
			return nil, nil, err // already an answer: the token's, or inTx's commit
		}
		return nil, nil, mapErr(err, "charge")
	}
	if created == 1 {
		return nil, deliveryTasks(deliveries), nil
	}
	replay, err := s.storedResponse(ctx, s.pool, c.MerchantID, n.Idem)
	return replay, nil, err
}

// createChargeAlone runs createCharge on the pool, with the request's audit
// entry when ctx carries one still to be written.
func (s *Store) createChargeAlone(ctx context.Context, args []any, created *int, deliveries *[]string) error {
	e, ok := audit.Claim(ctx)
	if !ok {
		return s.pool.QueryRow(ctx, createCharge, args...).Scan(created, deliveries)
	}
	a := auditArgs(e)
	args = append(args, a[0], a[2], a[3], a[4], a[5], a[6], a[8], a[9], a[10])
	err := s.pool.QueryRow(ctx, createChargeAudited, args...).Scan(created, deliveries)
	audit.Release(ctx, err == nil && *created == 1)
	return err
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const selectIdempotency = `SELECT fingerprint, status, response FROM idempotency_keys WHERE merchant_id = $1 AND key = $2`

// storedResponse returns the first response to a used key, or ErrReused if
// it answered another request.
func (s *Store) storedResponse(ctx context.Context, q querier, merchantID string, idem *idempotency.Request) (*idempotency.Response, error) {
	audit.Skip(ctx) // a replay changes nothing: no audit entry
	var fp []byte
	var r idempotency.Response
	if err := q.QueryRow(ctx, selectIdempotency, merchantID, idem.Key).Scan(&fp, &r.Status, &r.Body); err != nil {
		if errors.Is(err, pgx.ErrNoRows) { // pruned in between: very old; treat as in use, the client retries
			return nil, idempotency.ErrInUse()
		}
		return nil, mapErr(err, "idempotency key")
	}
	if !bytes.Equal(fp, idem.Fingerprint) {
		return nil, idempotency.ErrReused()
	}
	return &r, nil
}

// claimOrReplay claims an Idempotency-Key in tx (nil: there is none). It
// returns the stored answer when an earlier request claimed the key (a
// replay, or ErrReused for another request), and nil once it is claimed
// for this one.
func (s *Store) claimOrReplay(ctx context.Context, tx pgx.Tx, merchantID string, idem *idempotency.Request) (*idempotency.Response, error) {
	if idem == nil {
		return nil, nil
	}
	claimed, err := s.claimKey(ctx, tx, merchantID, idem)
	if err != nil || claimed {
		return nil, err
	}
	return s.storedResponse(ctx, tx, merchantID, idem)
}

func lockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

const selectCharge = `SELECT ` + chargeColumns + ` FROM charges WHERE id = $1 AND merchant_id = $2`

// ChargeByID returns the merchant's charge or NotFound.
func (s *Store) ChargeByID(ctx context.Context, merchantID, id string) (charges.Charge, error) {
	c, err := scanCharge(s.pool.QueryRow(ctx, selectCharge, id, merchantID))
	return c, mapErr(err, "charge")
}

// ListCharges returns a page of the merchant's charges, newest first.
func (s *Store) ListCharges(ctx context.Context, merchantID string, f charges.Filter, p listing.Params) (listing.Page[charges.Charge], error) {
	query := `SELECT ` + chargeColumns + ` FROM charges WHERE merchant_id = $1`
	args := []any{merchantID}
	if f.Status != "" {
		args = append(args, f.Status)
		query += ` AND status = $` + strconv.Itoa(len(args))
	}
	if f.CreatedGTE != nil {
		args = append(args, *f.CreatedGTE)
		query += ` AND created_at >= $` + strconv.Itoa(len(args))
	}
	if f.CreatedLTE != nil {
		args = append(args, *f.CreatedLTE)
		query += ` AND created_at <= $` + strconv.Itoa(len(args))
	}
	if f.Customer != "" {
		args = append(args, f.Customer)
		query += ` AND customer_id = $` + strconv.Itoa(len(args))
	}
	return listPage(ctx, s, query, args, p, func(r pgx.Row) (charges.Charge, error) { return scanCharge(r) }, "charge")
}

var (
	markAction = `UPDATE charges SET pending_action = $3, capture_amount = $4, updated_at = $5
WHERE id = $1 AND merchant_id = $2 AND pending_action IS NULL AND ($4::bigint IS NULL OR $4 <= amount)
	AND (status = 'authorized' OR ($3 = 'void' AND status = 'requires_action' AND action_answer IS NULL))
RETURNING ` + chargeColumns
	insertIdempotencyPlaceholder = `INSERT INTO idempotency_keys (merchant_id, key, fingerprint, status, response)
VALUES ($1, $2, $3, 0, '')
ON CONFLICT (merchant_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = 0, response = '', created_at = now()
WHERE idempotency_keys.created_at < ` + idempotencyCutoff
	completeIdempotency = `UPDATE idempotency_keys SET status = $3, response = $4 WHERE merchant_id = $1 AND key = $2`
	insertOutbox        = `INSERT INTO outbox (task_id, task_type, ref_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
)

// RequestAction implements charges.Store: in one transaction it claims the
// idempotency key, marks the authorized charge with the action, renders the
// response, and writes the task.
func (s *Store) RequestAction(ctx context.Context, r charges.ActionRequest) (*idempotency.Response, error) {
	var replay *idempotency.Response
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if stored, err := s.claimOrReplay(ctx, tx, r.MerchantID, r.Idem); err != nil || stored != nil {
			replay = stored
			return err
		}
		c, err := scanCharge(tx.QueryRow(ctx, markAction, r.ChargeID, r.MerchantID, r.Action, r.Amount, r.At))
		if errors.Is(err, pgx.ErrNoRows) {
			current, err := scanCharge(tx.QueryRow(ctx, selectCharge, r.ChargeID, r.MerchantID))
			if err != nil {
				return mapErr(err, "charge")
			}
			if err := charges.CheckAction(current, r.Action, r.Amount); err != nil {
				return err
			}
			return charges.ErrInvalidState("The charge changed; retry.")
		}
		if err != nil {
			return mapErr(err, "charge")
		}
		if r.Action == charges.ActionCapture && r.Amount != nil {
			// The transaction is rolled back: nothing is marked.
			if err := charges.CheckProviderAmount(c.Provider, c.Currency, *r.Amount); err != nil {
				return err
			}
		}
		resp, err := r.Render(c)
		if err != nil {
			return apperr.Internal(err)
		}
		b := &pgx.Batch{}
		b.Queue(insertOutbox, r.Task.ID(), r.Task.Type, r.Task.RefID)
		if r.Idem != nil {
			b.Queue(completeIdempotency, r.MerchantID, r.Idem.Key, resp.Status, resp.Body)
		}
		return mapErr(tx.SendBatch(ctx, b).Close(), "charge")
	})
	if err != nil && r.Idem != nil && lockTimeout(err) {
		return nil, idempotency.ErrInUse()
	}
	return replay, err
}

// claimKey inserts an in-flight idempotency record; false means the key exists.
func (s *Store) claimKey(ctx context.Context, tx pgx.Tx, merchantID string, idem *idempotency.Request) (bool, error) {
	tag, err := tx.Exec(ctx, insertIdempotencyPlaceholder, merchantID, idem.Key, idem.Fingerprint)
	if err != nil {
		if lockTimeout(err) {
			return false, idempotency.ErrInUse()
		}
		return false, mapErr(err, "idempotency key")
	}
	return tag.RowsAffected() == 1, nil
}

// inTx runs fn in a transaction, committing if it returns nil, with the
// request's audit entry when ctx carries one still to be written (see
// commitAudited).
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return mapErr(err, "transaction")
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // after Commit it is a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return commitAudited(ctx, tx)
}

const selectChargeForWork = `SELECT ` + chargeColumns + `, card_sealed,
	coalesce((SELECT pm.authenticated_at IS NOT NULL FROM payment_methods pm WHERE pm.id = charges.payment_method_id), false)
FROM charges WHERE id = $1`

// ChargeForWork returns a charge and its sealed card data for the worker,
// with whether its saved card (if any) was authenticated before.
func (s *Store) ChargeForWork(ctx context.Context, id string) (charges.Charge, []byte, error) {
	var sealed []byte
	var authenticated bool
	c, err := scanCharge(s.pool.QueryRow(ctx, selectChargeForWork, id), &sealed, &authenticated)
	c.SavedCardAuthenticated = authenticated
	return c, sealed, mapErr(err, "charge")
}

// applyTransition moves a charge if it is still where the worker found it
// (status, pending action, answer, attempts and connector),
// writes the event, drops the task that did it, writes the task the new
// state calls for (if any) and books the ledger transaction it causes (a
// capture's), in one statement.
var applyTransition = `
WITH upd AS (
	UPDATE charges SET status = $3, amount_captured = $4, provider_reference = $5, failure_code = $6,
		failure_message = $7, pending_action = $8, capture_amount = $9, updated_at = $10,
		card_sealed = CASE WHEN $11 THEN NULL ELSE card_sealed END,
		event_seq = event_seq + CASE WHEN $13::uuid IS NULL THEN 0 ELSE 1 END,
		authentication_status = $19, authentication_completed_at = $20, next_action_url = $21,
		action_expires_at = $22, action_answer = $23,
		attempts = $26::jsonb, connector_id = $27, provider = $28
	WHERE id = $1 AND status = $2 AND pending_action IS NOT DISTINCT FROM $12::text
		AND action_answer IS NOT DISTINCT FROM $24::text AND jsonb_array_length(attempts) = $29
		AND connector_id IS NOT DISTINCT FROM $30::text
	RETURNING id, merchant_id, environment, event_seq, payment_method_id
), pm AS (
	UPDATE payment_methods SET authenticated_at = coalesce(authenticated_at, $10)
	WHERE $25::bool AND id IN (SELECT payment_method_id FROM upd)
), ev AS (
	INSERT INTO events (id, merchant_id, environment, type, body, created_at, charge_id, object_id, sequence)
	SELECT $13::uuid, upd.merchant_id, upd.environment, $14::text, $15::json, $10::timestamptz, upd.id, upd.id, upd.event_seq
	FROM upd WHERE $13::uuid IS NOT NULL
	RETURNING ` + eventReturning + `
), ob AS (
	DELETE FROM outbox WHERE task_id = $16
), nt AS (
	INSERT INTO outbox (task_id, task_type, ref_id, attempt)
	SELECT $17::text, $18::text, upd.id, $31::int FROM upd WHERE $17::text IS NOT NULL
	ON CONFLICT (task_id) DO UPDATE SET created_at = now(), attempt = EXCLUDED.attempt
), ` + bookCTE("bk", 32, "upd") + fanout + `
SELECT count(*), ` + deliveriesOf + ` FROM upd`

// ApplyTransition implements charges.Store.
func (s *Store) ApplyTransition(ctx context.Context, t charges.Transition) (bool, []outbox.Task, error) {
	a := t.After
	var evID, evType *string
	var evBody []byte
	if t.Event != nil {
		evID, evType, evBody = &t.Event.ID, &t.Event.Type, t.Event.Body
	}
	var thenID, thenType *string
	var thenAttempt int
	if t.Then != nil {
		id := t.Then.ID()
		thenID, thenType, thenAttempt = &id, &t.Then.Type, t.Then.Attempt
	}
	var n int
	var deliveries []string
	args := []any{a.ID, t.Before.Status, a.Status, a.AmountCaptured, a.ProviderReference,
		a.FailureCode, a.FailureMessage, a.PendingAction, a.CaptureAmount, a.UpdatedAt, t.PurgeCard, t.Before.PendingAction,
		evID, evType, evBody, t.DoneTask, thenID, thenType,
		authStatus(a.Authentication.Status), a.Authentication.CompletedAt, a.Authentication.NextActionURL,
		a.Authentication.ExpiresAt, a.Authentication.Answer, t.Before.Authentication.Answer, t.SavedCardAuthenticated,
		attemptsJSON(a.Attempts), a.ConnectorID, a.Provider, len(t.Before.Attempts), t.Before.ConnectorID, thenAttempt}
	if t.Booking != nil {
		if err := t.Booking.Check(); err != nil {
			return false, nil, err
		}
	}
	args = append(args, bookingValues(t.Booking)...)
	err := s.pool.QueryRow(ctx, applyTransition, args...).Scan(&n, &deliveries)
	return n == 1, deliveryTasks(deliveries), mapErr(err, "charge")
}

// beginAttempt records a charge's current attempt before its call, if
// the charge is still created with the attempts the worker read.
const beginAttempt = `UPDATE charges SET attempts = attempts || jsonb_build_array($3::jsonb)
WHERE id = $1 AND status = 'created' AND jsonb_array_length(attempts) = $2`

// BeginAttempt implements charges.Store.
func (s *Store) BeginAttempt(ctx context.Context, chargeID string, before int, a charges.Attempt) (bool, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, beginAttempt, chargeID, before, b)
	return tag.RowsAffected() == 1, mapErr(err, "charge")
}

// attemptsJSON is a charge's attempts as stored: [] for none.
func attemptsJSON(a []charges.Attempt) []byte {
	if len(a) == 0 {
		return []byte("[]")
	}
	b, _ := json.Marshal(a) // plain fields: cannot fail
	return b
}

// routeJSON is a charge's route as stored: NULL for none.
func routeJSON(r []charges.RouteStep) []byte {
	if len(r) == 0 {
		return nil
	}
	b, _ := json.Marshal(r)
	return b
}

const deleteTask = `DELETE FROM outbox WHERE task_id = $1`

// DeleteTask drops a finished task.
func (s *Store) DeleteTask(ctx context.Context, taskID string) error {
	_, err := s.pool.Exec(ctx, deleteTask, taskID)
	return mapErr(err, "task")
}

// authStatus is a charge's authentication status, not_required when unset.
func authStatus(s string) string {
	if s == "" {
		return charges.AuthNotRequired
	}
	return s
}
