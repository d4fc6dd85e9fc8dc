-- +goose Up
-- Two-factor sign-in (docs/team.md). A member's TOTP secret is sealed with
-- ENCRYPTION_KEY (internal/keyring), bound to the member's id; a pending one
-- waits for the first code that confirms it. mfa_last_step is the last time
-- step a code was accepted for, so a code works once.
ALTER TABLE members
    ADD COLUMN mfa_secret_sealed  bytea,
    ADD COLUMN mfa_pending_sealed bytea,
    ADD COLUMN mfa_last_step      bigint,
    ADD COLUMN mfa_enabled_at     timestamptz;

-- SHA-256 digests of a member's single-use recovery codes.
CREATE TABLE mfa_recovery_codes (
    member_id text NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    digest    bytea NOT NULL,
    used_at   timestamptz,
    PRIMARY KEY (member_id, digest)
);

-- The second step of a sign-in: SHA-256 of the challenge token, its
-- member, when it expires, and the wrong codes it has seen.
CREATE TABLE mfa_challenges (
    digest      bytea PRIMARY KEY,
    merchant_id text NOT NULL,
    member_id   text NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    expires_at  timestamptz NOT NULL,
    failures    integer NOT NULL DEFAULT 0
);
CREATE INDEX mfa_challenges_expires_at_idx ON mfa_challenges (expires_at);

-- An owner may require two-factor sign-in of every member.
ALTER TABLE merchants ADD COLUMN mfa_required boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE merchants DROP COLUMN mfa_required;
DROP TABLE mfa_challenges;
DROP TABLE mfa_recovery_codes;
ALTER TABLE members
    DROP COLUMN mfa_enabled_at,
    DROP COLUMN mfa_last_step,
    DROP COLUMN mfa_pending_sealed,
    DROP COLUMN mfa_secret_sealed;
