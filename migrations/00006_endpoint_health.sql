-- +goose NO TRANSACTION
-- +goose Up
-- Endpoint health (api/openapi.yaml): why and when an endpoint
-- was disabled, and since when its deliveries have done nothing but fail.
-- active stays the switch every reader uses; disabled_reason says why it is
-- off (NULL while it is on). failing_since is the first failed attempt since
-- the last success; WEBHOOK_DISABLE_AFTER past it, the next failure disables
-- the endpoint. Added nullable, so no table rewrite.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS disabled_reason text
    CHECK (disabled_reason IN ('manual', 'gone', 'failing'));
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS disabled_at timestamptz;
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS failing_since timestamptz;
-- Endpoints switched off before: by hand.
UPDATE webhook_endpoints SET disabled_reason = 'manual', disabled_at = updated_at
WHERE NOT active AND deleted_at IS NULL AND disabled_reason IS NULL;
-- A disabled endpoint still gets its deliveries (failed at once, not sent,
-- for recover), so fan-out reads every endpoint not deleted.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_endpoints_live_idx
    ON webhook_endpoints (merchant_id, environment) WHERE deleted_at IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_endpoints_live_idx;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS failing_since;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS disabled_at;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS disabled_reason;
