package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// insertIdempotencyRecord claims a key with its final response; a key in
// use for less than 24 hours is left alone (no row affected). A concurrent
// claim of the same key waits on the primary key until the first commits
// (then sees the record) or for lock_timeout (then ErrInUse).
var insertIdempotencyRecord = `INSERT INTO idempotency_keys (merchant_id, key, fingerprint, status, response)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (merchant_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
	response = EXCLUDED.response, created_at = now()
WHERE idempotency_keys.created_at < ` + idempotencyCutoff

// createOnce runs create in a transaction that first records the key with
// the first response, so the object and the record commit together. A key
// already used returns its stored response (or ErrReused for another
// request) and creates nothing. Without a key create runs alone.
func (s *Store) createOnce(ctx context.Context, merchantID string, idem *idempotency.Request, first idempotency.Response, create func(pgx.Tx) error) (*idempotency.Response, error) {
	var replay *idempotency.Response
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if idem != nil {
			tag, err := tx.Exec(ctx, insertIdempotencyRecord, merchantID, idem.Key, idem.Fingerprint, first.Status, first.Body)
			if err != nil {
				return mapErr(err, "idempotency key")
			}
			if tag.RowsAffected() == 0 {
				replay, err = s.storedResponse(ctx, tx, merchantID, idem)
				return err
			}
		}
		return create(tx)
	})
	if err != nil && idem != nil && lockTimeout(err) {
		return nil, idempotency.ErrInUse()
	}
	return replay, err
}

// CreateEndpoint implements webhooks.Store: the endpoint and the record of
// its Idempotency-Key (if any) in one transaction.
func (s *Store) CreateEndpoint(ctx context.Context, e webhooks.Endpoint, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error) {
	audit.SetObject(ctx, "webhook_endpoint", e.ID)
	return s.createOnce(ctx, e.MerchantID, idem, first, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertEndpoint, e.ID, e.MerchantID, e.Environment, e.URL, e.Events, e.Active, e.Description, e.SecretSealed, e.CreatedAt, e.Ordered, e.Filter,
			e.Auth, e.AuthSecretSealed, e.HeaderNames, e.HeadersSealed)
		return mapErr(err, "webhook_endpoint")
	})
}

// CreateKeyOnce implements apikeys.OnceStore: the key and the record of its
// Idempotency-Key in one transaction.
func (s *Store) CreateKeyOnce(ctx context.Context, k apikeys.Key, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error) {
	audit.SetObject(ctx, "api_key", k.ID)
	return s.createOnce(ctx, k.MerchantID, idem, first, func(tx pgx.Tx) error {
		args, err := insertKeyArgs(k)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertKey, args...)
		return mapErr(err, "api_key")
	})
}
