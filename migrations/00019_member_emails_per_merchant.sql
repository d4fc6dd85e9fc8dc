-- +goose Up
-- Member emails are unique per merchant, not across Gatehouse (docs/team.md):
-- one person may belong to several accounts, each membership with its own
-- password and second factor, and an invitation neither reveals nor is
-- blocked by a membership of another account. Sign-in looks a person's
-- memberships up by address, hence the plain index beside the unique one.
DROP INDEX members_email_key;
CREATE UNIQUE INDEX members_merchant_email_key ON members (merchant_id, lower(email)) WHERE removed_at IS NULL;
CREATE INDEX members_email_idx ON members (lower(email)) WHERE removed_at IS NULL;

-- A merchant's email is its first owner's, who may own other accounts too.
DROP INDEX merchants_email_key;

COMMENT ON COLUMN mfa_challenges.failures IS
    'codes checked against the challenge: counted, at most 5, before each code is compared';

-- +goose Down
-- Fails while an address belongs to several accounts.
COMMENT ON COLUMN mfa_challenges.failures IS NULL;
CREATE UNIQUE INDEX merchants_email_key ON merchants (lower(email));
DROP INDEX members_email_idx;
DROP INDEX members_merchant_email_key;
CREATE UNIQUE INDEX members_email_key ON members (lower(email)) WHERE removed_at IS NULL;
