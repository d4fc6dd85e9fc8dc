package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

const connectorColumns = `id, merchant_id, provider, name, enabled, server_account, credentials_sealed, sandbox,
created_at, updated_at, deleted_at, fees, payout_schedule`

func scanConnector(row pgx.Row) (connectors.Connector, error) {
	var c connectors.Connector
	err := row.Scan(&c.ID, &c.MerchantID, &c.Provider, &c.Name, &c.Enabled, &c.ServerAccount, &c.Sealed, &c.Sandbox,
		&c.CreatedAt, &c.UpdatedAt, &c.DeletedAt, &c.Fees, &c.PayoutSchedule)
	return c, err
}

const insertConnector = `INSERT INTO connectors (id, merchant_id, provider, name, enabled, server_account,
	credentials_sealed, sandbox, created_at, updated_at, fees, payout_schedule)
VALUES ($1, $2, $3, $4, $5, false, $6, $7, $8, $8, $9, coalesce(nullif($10, ''), 'daily'))`

// CreateConnector implements connectors.Store.
func (s *Store) CreateConnector(ctx context.Context, c connectors.Connector, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error) {
	audit.SetObject(ctx, "connector", c.ID)
	return s.createOnce(ctx, c.MerchantID, idem, first, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertConnector, c.ID, c.MerchantID, c.Provider, c.Name, c.Enabled, c.Sealed, c.Sandbox, c.CreatedAt, c.Fees, c.PayoutSchedule)
		return mapErr(err, "connector")
	})
}

const selectConnector = `SELECT ` + connectorColumns + ` FROM connectors WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL`

// ConnectorByID implements connectors.Store.
func (s *Store) ConnectorByID(ctx context.Context, merchantID, id string) (connectors.Connector, error) {
	c, err := scanConnector(s.pool.QueryRow(ctx, selectConnector, id, merchantID))
	return c, mapErr(err, "connector")
}

// ListConnectors implements connectors.Store: newest first.
func (s *Store) ListConnectors(ctx context.Context, merchantID string, p listing.Params) (listing.Page[connectors.Connector], error) {
	query := `SELECT ` + connectorColumns + ` FROM connectors WHERE merchant_id = $1 AND deleted_at IS NULL`
	return listPage(ctx, s, query, []any{merchantID}, p, scanConnector, "connector")
}

const updateConnector = `UPDATE connectors SET name = coalesce($3, name), enabled = coalesce($4, enabled),
	credentials_sealed = coalesce($5, credentials_sealed), sandbox = coalesce($6, sandbox), updated_at = $7,
	fees = coalesce($8, fees), payout_schedule = coalesce($9, payout_schedule)
WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL
RETURNING ` + connectorColumns

// UpdateConnector implements connectors.Store.
func (s *Store) UpdateConnector(ctx context.Context, merchantID, id string, p connectors.Patch) (c connectors.Connector, err error) {
	err = s.audited(ctx, func(q dbtx) error {
		c, err = scanConnector(q.QueryRow(ctx, updateConnector, id, merchantID, p.Name, p.Enabled, p.Sealed, p.Sandbox, p.At, p.Fees, p.PayoutSchedule))
		return mapErr(err, "connector")
	})
	return c, err
}

// deleteConnector marks a connector deleted unless it is a server account
// or the merchant's routing names it; the flags tell which.
const deleteConnector = `
WITH target AS (
	SELECT id, server_account,
		EXISTS (SELECT 1 FROM routing r WHERE r.merchant_id = $2
			AND jsonb_path_exists(r.config, '$.** ? (@ == $id)', jsonb_build_object('id', $1::text))) AS routed
	FROM connectors WHERE id = $1 AND merchant_id = $2 AND deleted_at IS NULL
	FOR UPDATE
), del AS (
	UPDATE connectors SET deleted_at = $3, enabled = false, updated_at = $3
	WHERE id IN (SELECT id FROM target WHERE NOT server_account AND NOT routed)
	RETURNING id
)
SELECT server_account, routed, EXISTS (SELECT 1 FROM del) FROM target`

// DeleteConnector implements connectors.Store.
func (s *Store) DeleteConnector(ctx context.Context, merchantID, id string, at time.Time) error {
	return s.audited(ctx, func(q dbtx) error {
		var server, routed, deleted bool
		err := q.QueryRow(ctx, deleteConnector, id, merchantID, at).Scan(&server, &routed, &deleted)
		switch {
		case err != nil:
			return mapErr(err, "connector")
		case server:
			return apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "This connector is the server's own account and cannot be deleted; disable it instead.")
		case routed:
			return apperr.New(apperr.KindConflict, apperr.CodeInvalidState, "Your routing names this connector; change the routing before deleting it.")
		case !deleted:
			return apperr.NotFound("connector")
		}
		return nil
	})
}

// ensureServerAccounts creates the merchant's server-account connectors
// it lacks.
const ensureServerAccounts = `
INSERT INTO connectors (id, merchant_id, provider, name, enabled, server_account, sandbox, created_at, updated_at)
SELECT p.id, $1, p.provider, p.name, true, true, CASE WHEN p.provider = 'sandbox' THEN '{}'::jsonb END, $4, $4
FROM unnest($2::text[], $3::text[], $5::text[]) AS p (id, provider, name)
WHERE NOT EXISTS (SELECT 1 FROM connectors c WHERE c.merchant_id = $1 AND c.provider = p.provider AND c.server_account)
ON CONFLICT DO NOTHING`

const selectLiveConnectors = `SELECT ` + connectorColumns + ` FROM connectors
WHERE merchant_id = $1 AND deleted_at IS NULL ORDER BY created_at, id`

const selectRouting = `SELECT config, version, updated_at FROM routing WHERE merchant_id = $1`

// serverAccountNames are the names of the server-account connectors.
var serverAccountNames = map[string]string{
	connectors.ProviderSandbox: "Sandbox",
	connectors.ProviderStripe:  "Stripe (server account)",
}

// Snapshot implements connectors.Store.
func (s *Store) Snapshot(ctx context.Context, merchantID string, serverProviders []string, at time.Time) (connectors.Snapshot, error) {
	var snap connectors.Snapshot
	if len(serverProviders) > 0 {
		newIDs := make([]string, len(serverProviders))
		names := make([]string, len(serverProviders))
		for i, p := range serverProviders {
			newIDs[i], names[i] = ids.New(connectors.Prefix), serverAccountNames[p]
			if names[i] == "" {
				names[i] = p
			}
		}
		if _, err := s.pool.Exec(ctx, ensureServerAccounts, merchantID, newIDs, serverProviders, at, names); err != nil {
			return snap, mapErr(err, "connector")
		}
	}
	rows, err := s.pool.Query(ctx, selectLiveConnectors, merchantID)
	if err != nil {
		return snap, mapErr(err, "connector")
	}
	snap.Connectors, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (connectors.Connector, error) { return scanConnector(r) })
	if err != nil {
		return snap, mapErr(err, "connector")
	}
	var r connectors.Routing
	var config []byte
	var updated time.Time
	err = s.pool.QueryRow(ctx, selectRouting, merchantID).Scan(&config, &r.Version, &updated)
	switch {
	case err == pgx.ErrNoRows:
		return snap, nil
	case err != nil:
		return snap, mapErr(err, "routing")
	}
	if err := json.Unmarshal(config, &r); err != nil {
		return snap, apperr.Internal(err)
	}
	r.UpdatedAt = &updated
	snap.Routing = &r
	return snap, nil
}

const putRouting = `INSERT INTO routing (merchant_id, config, version, updated_at) VALUES ($1, $2, 1, $3)
ON CONFLICT (merchant_id) DO UPDATE SET config = EXCLUDED.config, version = routing.version + 1, updated_at = EXCLUDED.updated_at
RETURNING version, updated_at`

// PutRouting implements connectors.Store.
func (s *Store) PutRouting(ctx context.Context, merchantID string, r connectors.Routing, at time.Time) (connectors.Routing, error) {
	config, err := json.Marshal(r)
	if err != nil {
		return r, apperr.Internal(err)
	}
	var updated time.Time
	if err := s.audited(ctx, func(q dbtx) error {
		return mapErr(q.QueryRow(ctx, putRouting, merchantID, config, at).Scan(&r.Version, &updated), "routing")
	}); err != nil {
		return r, err
	}
	r.UpdatedAt = &updated
	return r, nil
}

const selectConnectorForWork = `SELECT ` + connectorColumns + ` FROM connectors WHERE id = $1`

// ConnectorForWork implements connectors.Store.
func (s *Store) ConnectorForWork(ctx context.Context, id string) (connectors.Connector, error) {
	c, err := scanConnector(s.pool.QueryRow(ctx, selectConnectorForWork, id))
	return c, mapErr(err, "connector")
}
