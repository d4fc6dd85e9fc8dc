package store

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
)

const insertToken = `INSERT INTO card_tokens (id, merchant_id, environment, key_id, card_brand, card_last4,
	card_exp_month, card_exp_year, card_fingerprint, card_sealed, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// CreateToken implements charges.TokenStore.
func (s *Store) CreateToken(ctx context.Context, t charges.Token, sealed []byte, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error) {
	return s.createOnce(ctx, t.MerchantID, idem, first, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertToken, t.ID, t.MerchantID, t.Environment, t.KeyID, t.Card.Brand, t.Card.Last4,
			t.Card.ExpMonth, t.Card.ExpYear, t.Card.Fingerprint, sealed, t.CreatedAt, t.ExpiresAt)
		return mapErr(err, "token")
	})
}

const selectUsableToken = `SELECT id, merchant_id, environment, key_id, card_brand, card_last4, card_exp_month,
	card_exp_year, card_fingerprint, created_at, expires_at, card_sealed
FROM card_tokens
WHERE id = $1 AND merchant_id = $2 AND environment = $3 AND used_at IS NULL AND expires_at > $4
	AND card_sealed IS NOT NULL`

// UsableToken implements charges.TokenStore.
func (s *Store) UsableToken(ctx context.Context, merchantID, environment, id string, now time.Time) (charges.Token, []byte, error) {
	var t charges.Token
	var last4, fp string
	var month, year int
	var sealed []byte
	err := s.pool.QueryRow(ctx, selectUsableToken, id, merchantID, environment, now).Scan(&t.ID, &t.MerchantID,
		&t.Environment, &t.KeyID, &t.Card.Brand, &last4, &month, &year, &fp, &t.CreatedAt, &t.ExpiresAt, &sealed)
	if err != nil {
		return charges.Token{}, nil, mapErr(err, "token")
	}
	t.Card.Last4, t.Card.ExpMonth, t.Card.ExpYear, t.Card.Fingerprint = &last4, &month, &year, &fp
	return t, sealed, nil
}

var selectLiveIdempotency = `SELECT fingerprint, status, response FROM idempotency_keys
WHERE merchant_id = $1 AND key = $2 AND created_at >= ` + idempotencyCutoff

// StoredResponse implements charges.TokenStore.
func (s *Store) StoredResponse(ctx context.Context, merchantID string, idem *idempotency.Request) (*idempotency.Response, error) {
	var fp []byte
	var r idempotency.Response
	err := s.pool.QueryRow(ctx, selectLiveIdempotency, merchantID, idem.Key).Scan(&fp, &r.Status, &r.Body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, mapErr(err, "idempotency key")
	case !bytes.Equal(fp, idem.Fingerprint):
		return nil, idempotency.ErrReused()
	}
	audit.Skip(ctx) // a replay changes nothing: no audit entry
	return &r, nil
}

// useToken marks a charge's token used, in the charge's transaction, and
// clears its copy of the card; a token used meanwhile by another charge, or
// expired, is errTokenUnusable and the transaction rolls back.
const useToken = `UPDATE card_tokens SET used_at = $4, charge_id = $5, card_sealed = NULL
WHERE id = $1 AND merchant_id = $2 AND environment = $3 AND used_at IS NULL AND expires_at > $4`

// PruneCardTokens clears the sealed cards of tokens that expired unused
// before now, and deletes tokens that expired before now minus the
// retention period.
func (s *Store) PruneCardTokens(ctx context.Context, now time.Time) (cleared, deleted int64, err error) {
	tag, err := s.pool.Exec(ctx, `UPDATE card_tokens SET card_sealed = NULL WHERE expires_at <= $1 AND card_sealed IS NOT NULL`, now)
	if err != nil {
		return 0, 0, mapErr(err, "token")
	}
	cleared = tag.RowsAffected()
	tag, err = s.pool.Exec(ctx, `DELETE FROM card_tokens WHERE expires_at <= $1`, now.Add(-charges.TokenRetention))
	return cleared, tag.RowsAffected(), mapErr(err, "token")
}
