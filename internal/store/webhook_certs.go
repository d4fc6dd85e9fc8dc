package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

const clientCertColumns = `id, merchant_id, environment, certificate_pem, key_sealed, fingerprint_sha256,
not_before, not_after, created_at, retired_at`

func scanClientCert(row pgx.Row) (webhooks.ClientCert, error) {
	var c webhooks.ClientCert
	err := row.Scan(&c.ID, &c.MerchantID, &c.Environment, &c.CertificatePEM, &c.KeySealed, &c.Fingerprint,
		&c.NotBefore, &c.NotAfter, &c.CreatedAt, &c.RetiredAt)
	return c, err
}

// selectClientCerts reads the current certificate of a merchant's
// environment and the latest retired after $3, current first.
const selectClientCerts = `(SELECT ` + clientCertColumns + ` FROM webhook_client_certificates
	WHERE merchant_id = $1 AND environment = $2 AND retired_at IS NULL)
UNION ALL
(SELECT ` + clientCertColumns + ` FROM webhook_client_certificates
	WHERE merchant_id = $1 AND environment = $2 AND retired_at > $3 ORDER BY retired_at DESC LIMIT 1)`

// ClientCertificate implements webhooks.ClientCertStore.
func (s *Store) ClientCertificate(ctx context.Context, merchantID, environment string, since time.Time) (webhooks.ClientCert, *webhooks.ClientCert, error) {
	rows, err := s.pool.Query(ctx, selectClientCerts, merchantID, environment, since)
	if err != nil {
		return webhooks.ClientCert{}, nil, mapErr(err, "webhook_client_certificate")
	}
	certs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (webhooks.ClientCert, error) { return scanClientCert(r) })
	if err != nil {
		return webhooks.ClientCert{}, nil, mapErr(err, "webhook_client_certificate")
	}
	var cur webhooks.ClientCert
	var prev *webhooks.ClientCert
	found := false
	for _, c := range certs {
		if c.RetiredAt == nil {
			cur, found = c, true
		} else {
			prev = &c
		}
	}
	if !found {
		return webhooks.ClientCert{}, nil, apperr.NotFound("webhook_client_certificate")
	}
	return cur, prev, nil
}

const insertClientCert = `INSERT INTO webhook_client_certificates (` + clientCertColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL)`

// AddClientCertificate implements webhooks.ClientCertStore: the
// certificate is kept only if its merchant has no current one in its
// environment (the first of two concurrent first needs wins).
func (s *Store) AddClientCertificate(ctx context.Context, c webhooks.ClientCert) error {
	_, err := s.pool.Exec(ctx, insertClientCert+` ON CONFLICT (merchant_id, environment) WHERE retired_at IS NULL DO NOTHING`,
		c.ID, c.MerchantID, c.Environment, c.CertificatePEM, c.KeySealed, c.Fingerprint, c.NotBefore, c.NotAfter, c.CreatedAt)
	return mapErr(err, "webhook_client_certificate")
}

// Rotation: retire the current certificate, delete those retired before
// $4, keep the new one; the retirement and the insert run in one
// transaction, so there is always at most one current certificate.
const (
	retireClientCert = `UPDATE webhook_client_certificates SET retired_at = $3
WHERE merchant_id = $1 AND environment = $2 AND retired_at IS NULL`
	pruneClientCerts = `DELETE FROM webhook_client_certificates
WHERE merchant_id = $1 AND environment = $2 AND retired_at IS NOT NULL AND retired_at <= $3`
)

// RotateClientCertificate implements webhooks.ClientCertStore.
func (s *Store) RotateClientCertificate(ctx context.Context, c webhooks.ClientCert, before time.Time) error {
	audit.SetObject(ctx, "webhook_client_certificate", c.ID)
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, retireClientCert, c.MerchantID, c.Environment, c.CreatedAt); err != nil {
			return mapErr(err, "webhook_client_certificate")
		}
		if _, err := tx.Exec(ctx, pruneClientCerts, c.MerchantID, c.Environment, before); err != nil {
			return mapErr(err, "webhook_client_certificate")
		}
		_, err := tx.Exec(ctx, insertClientCert, c.ID, c.MerchantID, c.Environment, c.CertificatePEM, c.KeySealed,
			c.Fingerprint, c.NotBefore, c.NotAfter, c.CreatedAt)
		return mapErr(err, "webhook_client_certificate")
	})
}
