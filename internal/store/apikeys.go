package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// keyColumns include the member who made the key (migration 00017), NULL
// for keys made before it.
const keyColumns = `id, merchant_id, name, environment, public_key, secret_digest, secret_last4, created_at, revoked_at, permissions, expires_at, created_by`

const insertKey = `INSERT INTO api_keys (` + keyColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9, NULL, NULLIF($10, ''))`

// permissionsJSON is a restricted key's permissions as stored: resource to
// level, the resources it may not touch left out. A secret key's are NULL.
func permissionsJSON(p authz.Permissions) ([]byte, error) {
	if p == nil {
		return nil, nil
	}
	m := map[string]string{}
	for r, a := range p {
		if a > authz.None {
			m[string(r)] = a.String()
		}
	}
	return json.Marshal(m)
}

func parsePermissions(b []byte) (authz.Permissions, error) {
	if b == nil {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("store: api_keys.permissions: %w", err)
	}
	p := authz.Permissions{}
	for r, level := range m {
		a, ok := authz.ParseAccess(level)
		if !ok {
			return nil, fmt.Errorf("store: api_keys.permissions: level %q", level)
		}
		if a > authz.None {
			p[authz.Resource(r)] = a
		}
	}
	return p, nil
}

func scanKey(r pgx.Row) (apikeys.Key, error) {
	var k apikeys.Key
	var perms []byte
	var createdBy *string
	if err := r.Scan(&k.ID, &k.MerchantID, &k.Name, &k.Environment, &k.PublicKey, &k.SecretDigest, &k.SecretLast4,
		&k.CreatedAt, &k.RevokedAt, &perms, &k.ExpiresAt, &createdBy); err != nil {
		return apikeys.Key{}, err
	}
	if createdBy != nil {
		k.CreatedBy = *createdBy
	}
	p, err := parsePermissions(perms)
	k.Permissions = p
	return k, err
}

func oneKey(rows pgx.Rows, err error) (apikeys.Key, error) {
	if err != nil {
		return apikeys.Key{}, mapErr(err, "api_key")
	}
	k, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (apikeys.Key, error) { return scanKey(r) })
	return k, mapErr(err, "api_key")
}

func insertKeyArgs(k apikeys.Key) ([]any, error) {
	perms, err := permissionsJSON(k.Permissions)
	if err != nil {
		return nil, apperr.Internal(err)
	}
	return []any{k.ID, k.MerchantID, k.Name, k.Environment, k.PublicKey, k.SecretDigest, k.SecretLast4, k.CreatedAt, perms, k.CreatedBy}, nil
}

// CreateKey stores a new key.
func (s *Store) CreateKey(ctx context.Context, k apikeys.Key) error {
	args, err := insertKeyArgs(k)
	if err != nil {
		return err
	}
	audit.SetObject(ctx, "api_key", k.ID)
	return s.audited(ctx, func(q dbtx) error {
		_, err := q.Exec(ctx, insertKey, args...)
		return mapErr(err, "api_key")
	})
}

// ListKeys returns one page of the merchant's keys that f keeps, newest
// first. An active key is neither revoked nor rolled.
func (s *Store) ListKeys(ctx context.Context, merchantID string, f apikeys.Filter, p listing.Params) (listing.Page[apikeys.Key], error) {
	query, args := `SELECT `+keyColumns+` FROM api_keys WHERE merchant_id = $1`, []any{merchantID}
	if f.CreatedBy != "" {
		args = append(args, f.CreatedBy)
		query += ` AND created_by = $2`
	}
	if f.Active {
		query += ` AND revoked_at IS NULL AND expires_at IS NULL`
	}
	return listPage(ctx, s, query, args, p, scanKey, "api_key")
}

const selectKeyByDigest = `SELECT ` + keyColumns + ` FROM api_keys WHERE secret_digest = $1`

// KeyByDigest returns the key whose secret has this digest, or NotFound.
func (s *Store) KeyByDigest(ctx context.Context, digest []byte) (apikeys.Key, error) {
	return oneKey(s.pool.Query(ctx, selectKeyByDigest, digest))
}

const selectKeyByPublicKey = `SELECT ` + keyColumns + ` FROM api_keys WHERE public_key = $1`

// KeyByPublicKey returns the key pair with this public key, or NotFound.
func (s *Store) KeyByPublicKey(ctx context.Context, publicKey string) (apikeys.Key, error) {
	return oneKey(s.pool.Query(ctx, selectKeyByPublicKey, publicKey))
}

const revokeKey = `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now())
WHERE id = $1 AND merchant_id = $2 RETURNING ` + keyColumns

// RevokeKey revokes one of the merchant's keys; another merchant's key is NotFound.
func (s *Store) RevokeKey(ctx context.Context, merchantID, id string) (k apikeys.Key, err error) {
	err = s.audited(ctx, func(q dbtx) error {
		k, err = oneKey(q.Query(ctx, revokeKey, id, merchantID))
		return err
	})
	return k, err
}

const selectKeyByID = `SELECT ` + keyColumns + ` FROM api_keys WHERE id = $1 AND merchant_id = $2`

// KeyByID returns one of the merchant's keys; another merchant's key is NotFound.
func (s *Store) KeyByID(ctx context.Context, merchantID, id string) (apikeys.Key, error) {
	return oneKey(s.pool.Query(ctx, selectKeyByID, id, merchantID))
}

// expireKey sets the expiry of a key that has none and is not revoked, and
// its revocation too when $4 is set.
const expireKey = `UPDATE api_keys SET expires_at = $3::timestamptz, revoked_at = CASE WHEN $4::boolean THEN $3::timestamptz END
WHERE id = $1 AND merchant_id = $2 AND revoked_at IS NULL AND expires_at IS NULL RETURNING ` + keyColumns

// RollKey implements apikeys.Store: next and the old key's expiry commit
// together, or neither does.
func (s *Store) RollKey(ctx context.Context, merchantID, oldID string, next apikeys.Key, expiresAt time.Time, revoke bool) (apikeys.Key, error) {
	args, err := insertKeyArgs(next)
	if err != nil {
		return apikeys.Key{}, err
	}
	var old apikeys.Key
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, expireKey, oldID, merchantID, expiresAt, revoke)
		old, err = oneKey(rows, err)
		if apperr.KindOf(err) == apperr.KindNotFound {
			// Another merchant's key is not found; one that changed since it
			// was read was revoked or rolled meanwhile.
			k, kerr := oneKey(tx.Query(ctx, selectKeyByID, oldID, merchantID))
			if kerr != nil {
				return kerr
			}
			return apikeys.ErrNotRollable(k)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, insertKey, args...)
		return mapErr(err, "api_key")
	})
	return old, err
}
