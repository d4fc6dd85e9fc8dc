-- +goose NO TRANSACTION
-- +goose Up
-- The events of one charge (its own and its refunds'), newest first, for the
-- dashboard's charge page. Every event is about one charge (data.charge.id);
-- the writers set charge_id from the row they change, which costs about a
-- microsecond per event where an index on the JSON body would cost six.
-- Built concurrently, so a busy events table is not locked for writes.
ALTER TABLE events ADD COLUMN IF NOT EXISTS charge_id uuid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_merchant_charge_idx ON events (merchant_id, charge_id, id DESC);
-- The events still without charge_id: those written before this migration,
-- or by a replica of the previous release during the rollout. The retention
-- prune fills them (store.FillEventCharges); the index stays empty after.
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_charge_missing_idx ON events (id) WHERE charge_id IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS events_charge_missing_idx;
DROP INDEX CONCURRENTLY IF EXISTS events_merchant_charge_idx;
ALTER TABLE events DROP COLUMN IF EXISTS charge_id;
