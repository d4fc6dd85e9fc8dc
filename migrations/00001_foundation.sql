-- +goose Up
CREATE TABLE merchants (
    id            text PRIMARY KEY,
    email         text NOT NULL,
    name          text NOT NULL,
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX merchants_email_key ON merchants (lower(email));

CREATE TABLE sessions (
    id          text PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX sessions_expires_at_idx ON sessions (expires_at);

CREATE TABLE api_keys (
    id            text PRIMARY KEY,
    merchant_id   text NOT NULL REFERENCES merchants (id) ON DELETE CASCADE,
    name          text NOT NULL DEFAULT '',
    environment   text NOT NULL CHECK (environment IN ('sandbox', 'live')),
    public_key    text NOT NULL UNIQUE,
    secret_digest bytea NOT NULL UNIQUE,
    secret_last4  text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);
CREATE INDEX api_keys_merchant_id_idx ON api_keys (merchant_id, id DESC);

-- +goose Down
DROP TABLE api_keys;
DROP TABLE sessions;
DROP TABLE merchants;
