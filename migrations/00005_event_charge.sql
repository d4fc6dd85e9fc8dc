-- +goose NO TRANSACTION
-- +goose Up
-- The events of one charge (its own and its refunds'), newest first, for the
-- dashboard's charge page. Every event body holds its charge at
-- data.charge.id; the expression must stay the one in store/events.go.
-- Built concurrently, so a busy events table is not locked for writes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_merchant_charge_idx
    ON events (merchant_id, ((body -> 'data' -> 'charge' ->> 'id')), id DESC);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS events_merchant_charge_idx;
