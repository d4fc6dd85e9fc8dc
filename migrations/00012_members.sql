-- +goose Up
-- A merchant's team. Every merchant's login becomes its first owner, whose
-- id is the merchant's with the member prefix, so tokens issued before
-- members existed still name a member.
CREATE TABLE members (
    id               text PRIMARY KEY,
    merchant_id      text NOT NULL REFERENCES merchants (id) ON DELETE CASCADE,
    email            text NOT NULL,
    role             text NOT NULL CHECK (role IN ('owner', 'admin', 'developer', 'support', 'viewer')),
    -- NULL until the invited person sets a password through the setup link.
    password_hash    text,
    -- SHA-256 of the single-use setup token, cleared when it is used.
    setup_digest     bytea UNIQUE,
    setup_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    removed_at       timestamptz
);
-- One sign-in per address among the members who can sign in.
CREATE UNIQUE INDEX members_email_key ON members (lower(email)) WHERE removed_at IS NULL;
CREATE INDEX members_merchant_id_idx ON members (merchant_id, id DESC);

INSERT INTO members (id, merchant_id, email, role, password_hash, created_at, updated_at)
SELECT 'mem_' || substr(id, 5), id, email, 'owner', password_hash, created_at, created_at FROM merchants;

ALTER TABLE sessions ADD COLUMN member_id text;
UPDATE sessions SET member_id = 'mem_' || substr(merchant_id, 5);
CREATE INDEX sessions_member_id_idx ON sessions (member_id) WHERE revoked_at IS NULL;

-- +goose Down
DROP INDEX sessions_member_id_idx;
ALTER TABLE sessions DROP COLUMN member_id;
DROP TABLE members;
