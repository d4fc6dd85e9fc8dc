-- +goose Up
-- Who made each key (docs/keys.md): the member, mem_..., who created or
-- rolled it. NULL for keys made before this migration, whose maker was not
-- recorded. Members are never deleted (a removal only marks them), so the id
-- keeps naming its member; no foreign key, so that adding the column is a
-- catalog change that neither rewrites nor scans the table. The removal of
-- a member lists the keys it made from the merchant's own keys
-- (api_keys_merchant_id_idx), a handful of rows: no index of its own.
ALTER TABLE api_keys ADD COLUMN created_by text;

-- +goose Down
ALTER TABLE api_keys DROP COLUMN created_by;
