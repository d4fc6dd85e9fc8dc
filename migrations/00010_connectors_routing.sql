-- +goose Up
-- Connectors (a merchant's accounts at providers), the merchant's routing
-- rules, and the attempts a charge made across connectors.
--
-- A connector's credentials are sealed (AES-256-GCM, the connector's id as
-- associated data) and never read back out through the API. A connector
-- without credentials uses the server's own account at its provider (the
-- sandbox, or STRIPE_SECRET_KEY): every merchant gets those lazily, so
-- charges that worked before connectors keep working. A deleted connector
-- keeps its row (deleted_at): captures, voids and refunds of the charges it
-- took still go to it.
CREATE TABLE connectors (
    id                  text PRIMARY KEY,
    merchant_id         text NOT NULL REFERENCES merchants (id) ON DELETE CASCADE,
    provider            text NOT NULL CHECK (provider IN ('sandbox', 'stripe')),
    name                text NOT NULL,
    enabled             boolean NOT NULL DEFAULT true,
    -- server_account: the connector uses the server's own credentials.
    server_account      boolean NOT NULL DEFAULT false,
    credentials_sealed  bytea,
    -- The sandbox's rehearsal settings: {"unavailable","decline_code","latency_ms"}.
    sandbox             jsonb,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    deleted_at          timestamptz,
    CHECK (server_account OR provider = 'sandbox' OR credentials_sealed IS NOT NULL)
);
CREATE INDEX connectors_merchant_idx ON connectors (merchant_id, created_at, id) WHERE deleted_at IS NULL;
-- One server-account connector per merchant and provider.
CREATE UNIQUE INDEX connectors_server_account_key ON connectors (merchant_id, provider) WHERE server_account;

-- routing: a merchant's rules, validated on write. version grows with
-- every change, so caches can tell an old copy.
CREATE TABLE routing (
    merchant_id text PRIMARY KEY REFERENCES merchants (id) ON DELETE CASCADE,
    config      jsonb NOT NULL,
    version     bigint NOT NULL DEFAULT 1,
    updated_at  timestamptz NOT NULL
);

-- connector_id: the connector of the charge's current (or settling)
-- attempt; NULL for charges made before connectors, which use the server's
-- provider named in charges.provider. route: the connectors planned for the
-- charge, in order. attempts: one entry per attempt begun, the last the
-- current one.
ALTER TABLE charges
    ADD COLUMN connector_id text,
    ADD COLUMN route        jsonb,
    ADD COLUMN attempts     jsonb NOT NULL DEFAULT '[]';

-- outbox.attempt: the attempt a charge:authorize row asks for after a
-- failover (its queue task is charge:authorize:<id>:<attempt>), so the
-- sweeper resends the task under the id it was queued with.
ALTER TABLE outbox ADD COLUMN attempt int NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE outbox DROP COLUMN attempt;
ALTER TABLE charges DROP COLUMN connector_id, DROP COLUMN route, DROP COLUMN attempts;
DROP TABLE routing;
DROP TABLE connectors;
