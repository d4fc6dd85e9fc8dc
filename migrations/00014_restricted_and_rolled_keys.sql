-- +goose Up
-- Restricted keys and rolling (docs/keys.md). permissions is a restricted
-- key's, resource to "read" or "write" (resources it may not touch are left
-- out; '{}' is a key that may do nothing); NULL is a secret key, which every
-- key issued before this migration is. expires_at is set when a key is
-- rolled: the key is refused from then on, as if revoked, and cannot be
-- rolled again. Both columns are NULL for existing rows, so adding them
-- rewrites nothing.
ALTER TABLE api_keys ADD COLUMN permissions jsonb;
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;

-- +goose Down
ALTER TABLE api_keys DROP COLUMN expires_at;
ALTER TABLE api_keys DROP COLUMN permissions;
