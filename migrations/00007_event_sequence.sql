-- +goose NO TRANSACTION
-- +goose Up
-- Event order (api/openapi.yaml, X-Service-Sequence and "ordered"): every event carries a
-- sequence that grows with each event of the same object (a charge, or a
-- refund), counted on the object's row in the transaction that writes the
-- event; each delivery carries its event's sequence (X-Service-Sequence).
-- Counting starts with this release: events written before have none.
ALTER TABLE charges ADD COLUMN IF NOT EXISTS event_seq int NOT NULL DEFAULT 0;
ALTER TABLE refunds ADD COLUMN IF NOT EXISTS event_seq int NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN IF NOT EXISTS object_id uuid;
ALTER TABLE events ADD COLUMN IF NOT EXISTS sequence int;
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS sequence int;
-- An endpoint with "ordered": true receives one object's events in sequence
-- order. Its deliveries name their object (ordered_object); those of other
-- endpoints do not, so the index below never holds them and they pay nothing.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS ordered boolean NOT NULL DEFAULT false;
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS ordered_object uuid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_deliveries_ordered_idx
    ON webhook_deliveries (endpoint_id, ordered_object, sequence) WHERE ordered_object IS NOT NULL AND status = 'pending';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_deliveries_ordered_idx;
ALTER TABLE webhook_deliveries DROP COLUMN IF EXISTS ordered_object;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS ordered;
ALTER TABLE webhook_deliveries DROP COLUMN IF EXISTS sequence;
ALTER TABLE events DROP COLUMN IF EXISTS sequence;
ALTER TABLE events DROP COLUMN IF EXISTS object_id;
ALTER TABLE refunds DROP COLUMN IF EXISTS event_seq;
ALTER TABLE charges DROP COLUMN IF EXISTS event_seq;
