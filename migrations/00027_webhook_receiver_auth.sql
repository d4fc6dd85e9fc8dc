-- +goose Up
-- How the gateway authenticates itself to a merchant's receiver beyond the
-- signature (docs/webhooks.md, "Authenticating Gatehouse to your receiver").

-- auth: the endpoint's receiver authentication as the API checked it,
-- without its secret: {"type": "oauth2_client_credentials", "token_url",
-- "client_id", "scopes"} or {"type": "mtls"}; NULL for none.
-- auth_secret_sealed: the OAuth 2.0 client secret, sealed with
-- ENCRYPTION_KEY and bound to the endpoint's id.
-- header_names: the names of the static headers sent with every attempt;
-- headers_sealed: the headers (a JSON object of name to value), sealed the
-- same way, since their values may be credentials.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS auth jsonb;
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS auth_secret_sealed bytea;
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS header_names text[];
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS headers_sealed bytea;

-- webhook_client_certificates (wcc_...): the client certificate a merchant's
-- deliveries present to receivers that ask for one (mTLS), one current per
-- merchant and environment (retired_at IS NULL). A rotation retires the
-- current one; a retired one is shown as "previous" for 24 h and deleted by
-- a later rotation. The private key is sealed with ENCRYPTION_KEY.
CREATE TABLE webhook_client_certificates (
    id                 text PRIMARY KEY,
    merchant_id        text NOT NULL REFERENCES merchants (id),
    environment        text NOT NULL,
    certificate_pem    text NOT NULL,
    key_sealed         bytea NOT NULL,
    fingerprint_sha256 text NOT NULL,
    not_before         timestamptz NOT NULL,
    not_after          timestamptz NOT NULL,
    created_at         timestamptz NOT NULL,
    retired_at         timestamptz
);
CREATE UNIQUE INDEX webhook_client_certificates_current_idx ON webhook_client_certificates (merchant_id, environment)
    WHERE retired_at IS NULL;
CREATE INDEX webhook_client_certificates_retired_idx ON webhook_client_certificates (merchant_id, environment, retired_at DESC)
    WHERE retired_at IS NOT NULL;

-- +goose Down
DROP TABLE IF EXISTS webhook_client_certificates;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS headers_sealed;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS header_names;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS auth_secret_sealed;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS auth;
