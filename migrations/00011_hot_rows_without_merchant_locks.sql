-- +goose Up
-- The rows every charge writes (the charge, its events, its idempotency
-- record and its webhook deliveries) no longer carry foreign keys to their
-- merchant and endpoint. Each such check locks the parent row FOR KEY SHARE
-- until commit, and one busy merchant's concurrent transactions all lock the
-- same merchants and webhook_endpoints rows: PostgreSQL then builds a
-- MultiXact for every overlapping pair, which cost about a fifth of the
-- database's CPU per charge at 500 charges/s (docs/BENCHMARKS.md). Merchants
-- and endpoints are never deleted (an endpoint's deletion sets deleted_at),
-- and every one of these rows is written with the merchant id of an
-- authenticated request or of the row it derives from, so the checks guarded
-- nothing the application does not. The foreign keys of rarely written rows
-- (api keys, sessions, endpoints, customers, connectors, refunds) and of
-- webhook_attempts (whose cascade deletes a delivery's attempts with it) stay.
ALTER TABLE charges DROP CONSTRAINT IF EXISTS charges_merchant_id_fkey;
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_merchant_id_fkey;
ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_merchant_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_merchant_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_endpoint_id_fkey;

-- +goose Down
-- NOT VALID: rows written meanwhile are not checked, new ones are.
ALTER TABLE charges ADD CONSTRAINT charges_merchant_id_fkey FOREIGN KEY (merchant_id) REFERENCES merchants (id) NOT VALID;
ALTER TABLE events ADD CONSTRAINT events_merchant_id_fkey FOREIGN KEY (merchant_id) REFERENCES merchants (id) NOT VALID;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_merchant_id_fkey FOREIGN KEY (merchant_id) REFERENCES merchants (id) NOT VALID;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_merchant_id_fkey FOREIGN KEY (merchant_id) REFERENCES merchants (id) NOT VALID;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints (id) NOT VALID;
