-- +goose Up
-- Card tokens (api/openapi.yaml): a card collected in
-- the browser with a public key, kept only sealed (AES-256-GCM, the token id as
-- associated data) until a charge uses it or it expires. A charge that uses a
-- token takes its card, re-sealed under the charge's id, and marks the token
-- used in the charge's own transaction, clearing the token's copy.
CREATE TABLE card_tokens (
    id               text PRIMARY KEY,
    merchant_id      text NOT NULL REFERENCES merchants (id),
    environment      text NOT NULL,
    key_id           text NOT NULL,
    card_brand       text NOT NULL,
    card_last4       text NOT NULL,
    card_exp_month   int NOT NULL,
    card_exp_year    int NOT NULL,
    card_fingerprint text NOT NULL,
    card_sealed      bytea,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    used_at          timestamptz,
    charge_id        uuid,
    CHECK ((used_at IS NULL) = (charge_id IS NULL)),
    CHECK (used_at IS NULL OR card_sealed IS NULL)
);
-- The retention prune clears the sealed cards of expired tokens and deletes
-- old tokens, both by expiry.
CREATE INDEX card_tokens_expires_at_idx ON card_tokens (expires_at);

-- +goose Down
DROP TABLE card_tokens;
