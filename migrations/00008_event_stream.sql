-- +goose NO TRANSACTION
-- +goose Up
-- The event stream (GET /v1/events/stream) reads each merchant's events in
-- the order their transactions committed: the transaction id that wrote each
-- event, below the horizon of transactions still running (events.Hub). The
-- default applies to new rows only, so no rewrite; events written before
-- have none and are not streamed (GET /v1/events lists them).
ALTER TABLE events ADD COLUMN IF NOT EXISTS txid xid8;
ALTER TABLE events ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_stream_idx ON events (merchant_id, txid, id) WHERE txid IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS events_stream_idx;
ALTER TABLE events DROP COLUMN IF EXISTS txid;
