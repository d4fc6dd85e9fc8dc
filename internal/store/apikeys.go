package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

const keyColumns = `id, merchant_id, name, environment, public_key, secret_digest, secret_last4, created_at, revoked_at`

const insertKey = `INSERT INTO api_keys (` + keyColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)`

// CreateKey stores a new key.
func (s *Store) CreateKey(ctx context.Context, k apikeys.Key) error {
	audit.SetObject(ctx, "api_key", k.ID)
	return s.audited(ctx, func(q dbtx) error {
		_, err := q.Exec(ctx, insertKey, k.ID, k.MerchantID, k.Name, k.Environment, k.PublicKey, k.SecretDigest, k.SecretLast4, k.CreatedAt)
		return mapErr(err, "api_key")
	})
}

const ()

// ListKeys returns one page of the merchant's keys, newest first.
func (s *Store) ListKeys(ctx context.Context, merchantID string, p listing.Params) (listing.Page[apikeys.Key], error) {
	return listPage(ctx, s, `SELECT `+keyColumns+` FROM api_keys WHERE merchant_id = $1`, []any{merchantID}, p,
		func(r pgx.Row) (apikeys.Key, error) {
			var k apikeys.Key
			err := r.Scan(&k.ID, &k.MerchantID, &k.Name, &k.Environment, &k.PublicKey, &k.SecretDigest, &k.SecretLast4, &k.CreatedAt, &k.RevokedAt)
			return k, err
		}, "api_key")
}

const selectKeyByDigest = `SELECT ` + keyColumns + ` FROM api_keys WHERE secret_digest = $1`

// KeyByDigest returns the key whose secret has this digest, or NotFound.
func (s *Store) KeyByDigest(ctx context.Context, digest []byte) (apikeys.Key, error) {
	rows, _ := s.pool.Query(ctx, selectKeyByDigest, digest)
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[apikeys.Key])
	return k, mapErr(err, "api_key")
}

const selectKeyByPublicKey = `SELECT ` + keyColumns + ` FROM api_keys WHERE public_key = $1`

// KeyByPublicKey returns the key pair with this public key, or NotFound.
func (s *Store) KeyByPublicKey(ctx context.Context, publicKey string) (apikeys.Key, error) {
	rows, _ := s.pool.Query(ctx, selectKeyByPublicKey, publicKey)
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[apikeys.Key])
	return k, mapErr(err, "api_key")
}

const revokeKey = `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
WHERE id = $1 AND merchant_id = $2 RETURNING ` + keyColumns

// RevokeKey revokes one of the merchant's keys; another merchant's key is NotFound.
func (s *Store) RevokeKey(ctx context.Context, merchantID, id string) (k apikeys.Key, err error) {
	err = s.audited(ctx, func(q dbtx) error {
		rows, _ := q.Query(ctx, revokeKey, id, merchantID)
		k, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[apikeys.Key])
		return mapErr(err, "api_key")
	})
	return k, err
}

const selectKeyByID = `SELECT ` + keyColumns + ` FROM api_keys WHERE id = $1 AND merchant_id = $2`

// KeyByID returns one of the merchant's keys; another merchant's key is NotFound.
func (s *Store) KeyByID(ctx context.Context, merchantID, id string) (apikeys.Key, error) {
	rows, _ := s.pool.Query(ctx, selectKeyByID, id, merchantID)
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[apikeys.Key])
	return k, mapErr(err, "api_key")
}
