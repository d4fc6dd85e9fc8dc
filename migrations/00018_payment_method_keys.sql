-- +goose Up
-- A saved card under a data key of its own, deleted with it.
--
-- Until now a payment method kept its card (number, CVC, expiry) in
-- card_sealed, sealed under the one key derived from ENCRYPTION_KEY for
-- card data: a deleted method's row version, the WAL that wrote it and any
-- backup still opened with that key. From this release a method keeps its
-- card without the CVC, sealed (AES-256-GCM, the method's and merchant's ids
-- as associated data) under a random data key of its own, in
-- card_sealed_own; the data key, wrapped by a key derived from
-- ENCRYPTION_KEY, is a row of payment_method_keys, deleted with the method
-- in the same transaction. Once it is gone, a copy of the sealed card opens
-- only with a copy of the wrapped key that outlived the row (its dead row
-- version until vacuumed, freed page space, WAL, backups: docs/customers.md).
--
-- The previous release reads and writes card_sealed only, and keeps
-- working on this schema: a method it saves (card_sealed_own NULL, no key
-- row) is converted by this release on its first charge or by the worker's
-- housekeeping (payment_methods:housekeeping), which SQL cannot do since it
-- needs ENCRYPTION_KEY; a method this release saves holds in card_sealed a
-- seal of nothing, which the previous release opens and finds no card in,
-- so its charge of the method fails (processing_error) rather than erring.
-- Its deletions reach the key row through ON DELETE CASCADE.
ALTER TABLE payment_methods ADD COLUMN card_sealed_own bytea;
-- The methods left to convert.
CREATE INDEX payment_methods_legacy_idx ON payment_methods (id) WHERE card_sealed_own IS NULL;

-- One small row per method. Autovacuum takes the table as soon as it has a
-- dead row (at its next round, autovacuum_naptime, a minute by default),
-- and the worker's housekeeping vacuums it as soon as it sees one: a
-- deleted key's row version then stops being a row of the table; see
-- docs/customers.md for what may remain.
CREATE TABLE payment_method_keys (
    payment_method_id text PRIMARY KEY REFERENCES payment_methods (id) ON DELETE CASCADE,
    wrapped_key       bytea NOT NULL
) WITH (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0);

-- +goose Down
-- A card under its data key cannot be moved back into card_sealed by SQL
-- (nor by the previous release, which does not know data keys): those
-- methods are deleted, with their keys.
DELETE FROM payment_methods WHERE card_sealed_own IS NOT NULL;
DROP TABLE payment_method_keys;
DROP INDEX payment_methods_legacy_idx;
ALTER TABLE payment_methods DROP COLUMN card_sealed_own;
