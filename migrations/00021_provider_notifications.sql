-- +goose NO TRANSACTION
-- +goose Up
-- provider_notifications: what providers reported by notification (Stripe's
-- events, Adyen's notification items), written before the answer that
-- acknowledges them. dedup_key is the provider's own identity of the
-- notification (Stripe: the event id; Adyen: pspReference, eventCode,
-- success and originalReference): the first row of a key is applied by the
-- worker; a resent one is kept as a row of its own, outcome 'duplicate',
-- and changes nothing. outcome 'received' waits for the worker.
CREATE TABLE IF NOT EXISTS provider_notifications (
    id                uuid PRIMARY KEY,
    connector_id      text NOT NULL REFERENCES connectors (id) ON DELETE CASCADE,
    merchant_id       text NOT NULL,
    provider          text NOT NULL,
    provider_event_id text NOT NULL,
    dedup_key         text NOT NULL,
    type              text NOT NULL,
    payload           jsonb NOT NULL,
    outcome           text NOT NULL CHECK (outcome IN ('received', 'applied', 'duplicate', 'ignored')),
    charge_id         uuid,
    received_at       timestamptz NOT NULL,
    processed_at      timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS provider_notifications_dedup_key
    ON provider_notifications (connector_id, dedup_key) WHERE outcome <> 'duplicate';
CREATE INDEX IF NOT EXISTS provider_notifications_list_idx
    ON provider_notifications (connector_id, id DESC);
-- A notification names the provider's payment; the worker finds the charge
-- by it. Built concurrently, so a busy charges table is not locked for writes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_provider_reference_idx
    ON charges (provider_reference) WHERE provider_reference IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS charges_provider_reference_idx;
DROP TABLE IF EXISTS provider_notifications;
