-- +goose Up
-- Nothing reads events by created_at through an index: lists go by merchant
-- and id, retention drops whole partitions by id (ids are time-ordered),
-- and the retention cut-off of reads filters rows already found by
-- merchant. The index only cost every event an entry (two per charge on
-- the payment path). A partitioned index drops with its partitions'.
DROP INDEX IF EXISTS events_created_at_idx;
DROP INDEX IF EXISTS events_created_at_idx_legacy;

-- +goose Down
CREATE INDEX IF NOT EXISTS events_created_at_idx ON events (created_at);
