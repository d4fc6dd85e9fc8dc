-- +goose Up
-- +goose StatementBegin
-- gh_uuid_v7 makes time-ordered ids inside SQL (PostgreSQL 15 has no uuidv7).
CREATE FUNCTION gh_uuid_v7() RETURNS uuid AS $$
DECLARE
    ms bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
    b  bytea := uuid_send(gen_random_uuid());
BEGIN
    b := set_byte(b, 0, ((ms >> 40) & 255)::int);
    b := set_byte(b, 1, ((ms >> 32) & 255)::int);
    b := set_byte(b, 2, ((ms >> 24) & 255)::int);
    b := set_byte(b, 3, ((ms >> 16) & 255)::int);
    b := set_byte(b, 4, ((ms >> 8) & 255)::int);
    b := set_byte(b, 5, (ms & 255)::int);
    b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);
    b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);
    RETURN encode(b, 'hex')::uuid;
END
$$ LANGUAGE plpgsql VOLATILE;
-- +goose StatementEnd

CREATE TABLE webhook_endpoints (
    id                     text PRIMARY KEY,
    merchant_id            text NOT NULL REFERENCES merchants (id),
    environment            text NOT NULL,
    url                    text NOT NULL,
    events                 text[] NOT NULL CHECK (cardinality(events) > 0),
    active                 boolean NOT NULL DEFAULT true,
    description            text,
    secret_sealed          bytea NOT NULL,
    previous_secret_sealed bytea,
    previous_secret_until  timestamptz,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    deleted_at             timestamptz
);
CREATE INDEX webhook_endpoints_merchant_id_idx ON webhook_endpoints (merchant_id, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX webhook_endpoints_fanout_idx ON webhook_endpoints (merchant_id, environment) WHERE deleted_at IS NULL AND active;

-- One delivery per (event, endpoint). attempts counts every attempt made;
-- chain_attempts those of the current chain (a manual retry starts a new one),
-- which index the retry schedule.
CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    endpoint_id     text NOT NULL REFERENCES webhook_endpoints (id),
    merchant_id     text NOT NULL REFERENCES merchants (id),
    event_id        uuid NOT NULL,
    event_type      text NOT NULL,
    test_body       json,
    status          text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        int NOT NULL DEFAULT 0,
    chain_attempts  int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id DESC);
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (endpoint_id, created_at) WHERE status = 'failed';
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id);

CREATE TABLE webhook_attempts (
    delivery_id   uuid NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt       int NOT NULL,
    started_at    timestamptz NOT NULL,
    duration_ms   int NOT NULL,
    status_code   int,
    error         text,
    response_body text,
    PRIMARY KEY (delivery_id, attempt)
);

-- +goose Down
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP FUNCTION gh_uuid_v7();
