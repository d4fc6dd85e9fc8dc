package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
)

const chargeCustomerExists = `SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2 AND environment = $3`

// CustomerExists implements charges.CustomerStore.
func (s *Store) CustomerExists(ctx context.Context, merchantID, environment, customerID string) error {
	var one int
	err := s.pool.QueryRow(ctx, chargeCustomerExists, customerID, merchantID, environment).Scan(&one)
	return mapErr(err, "customer")
}

// ChallengeCharge returns the charge a challenge link names, whatever its
// merchant: the link's token, checked by the caller, is the credential.
func (s *Store) ChallengeCharge(ctx context.Context, id string) (charges.Charge, error) {
	c, err := scanCharge(s.pool.QueryRow(ctx, selectChargeByID, id))
	return c, mapErr(err, "charge")
}

// recordAnswer records the cardholder's answer once, while the charge still
// waits for it and its time is not up, and writes the task that settles it.
const recordAnswer = `
WITH upd AS (
	UPDATE charges SET action_answer = $2, updated_at = $3, action_details = $6
	WHERE id = $1 AND status = 'requires_action' AND pending_action IS NULL AND action_answer IS NULL
		AND action_expires_at > now()
	RETURNING ` + chargeColumns + `
), ob AS (
	INSERT INTO outbox (task_id, task_type, ref_id) SELECT $4::text, $5::text, upd.id FROM upd
	ON CONFLICT DO NOTHING
)
SELECT * FROM upd`

// RecordAnswer implements charges.ChallengeStore: it records answer and
// writes task in one statement, or returns charges.ErrChallengeClosed when
// the charge no longer waits for an answer.
func (s *Store) RecordAnswer(ctx context.Context, chargeID, answer string, details map[string]string, at time.Time, task outbox.Task) (charges.Charge, error) {
	var raw []byte
	if len(details) > 0 {
		var err error
		if raw, err = json.Marshal(details); err != nil {
			return charges.Charge{}, err
		}
	}
	c, err := scanCharge(s.pool.QueryRow(ctx, recordAnswer, chargeID, answer, at, task.ID(), task.Type, raw))
	if errors.Is(err, pgx.ErrNoRows) {
		return c, charges.ErrChallengeClosed
	}
	return c, mapErr(err, "charge")
}

// elementsCharge is a charge of the merchant that the card field may act
// for: its card came from one of the field's tokens, directly or through a
// payment method made from one.
const elementsCharge = `SELECT ` + chargeColumns + ` FROM charges c
WHERE c.id = $1 AND c.merchant_id = $2 AND c.environment = $3 AND (
	EXISTS (SELECT 1 FROM card_tokens t WHERE t.charge_id = c.id AND t.id = ANY($4::text[]))
	OR EXISTS (SELECT 1 FROM payment_methods pm WHERE pm.id = c.payment_method_id AND pm.token_id = ANY($4::text[])))`

// ElementsCharge implements charges.ChallengeStore.
func (s *Store) ElementsCharge(ctx context.Context, merchantID, environment, chargeID string, tokens []string) (charges.Charge, error) {
	c, err := scanCharge(s.pool.QueryRow(ctx, elementsCharge, chargeID, merchantID, environment, tokens))
	if err != nil {
		return c, mapErr(err, "charge")
	}
	return c, nil
}

// ActionDetails implements charges.Store: what the provider's challenge
// page sent the cardholder back with, nil for nothing.
func (s *Store) ActionDetails(ctx context.Context, chargeID string) (map[string]string, error) {
	var raw []byte
	if err := s.pool.QueryRow(ctx, `SELECT action_details FROM charges WHERE id = $1`, chargeID).Scan(&raw); err != nil {
		return nil, mapErr(err, "charge")
	}
	if raw == nil {
		return nil, nil
	}
	var details map[string]string
	if err := json.Unmarshal(raw, &details); err != nil {
		return nil, fmt.Errorf("store: the action details of charge %s: %w", chargeID, err)
	}
	return details, nil
}
