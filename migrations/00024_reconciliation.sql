-- +goose Up
-- Reconciliation (docs/ledger.md#reconciliation): the gateway's books
-- compared line by line with what the provider says it settled.

-- The sandbox keeps books of its own, like a provider: it now records which
-- account (connector) each call came through, whether an authorization (or
-- its authentication) captured at once, and when each call was booked, so
-- it can report what it settled for an account on a day from its own
-- records, never from the gateway's.
ALTER TABLE sandbox_ledger ADD COLUMN account text;
ALTER TABLE sandbox_ledger ADD COLUMN capture boolean NOT NULL DEFAULT false;
ALTER TABLE sandbox_ledger ADD COLUMN booked_at timestamptz;
CREATE INDEX sandbox_ledger_account_idx ON sandbox_ledger (account, booked_at)
    WHERE account IS NOT NULL AND reference IS NOT NULL;
-- The sandbox's bank run: a connector's payouts by when they were made,
-- and the failed ones by when they failed.
CREATE INDEX payouts_connector_idx ON payouts (connector_id, created_at);
CREATE INDEX payouts_failed_idx ON payouts (connector_id, updated_at) WHERE status = 'failed';

-- +goose Down
DROP INDEX IF EXISTS payouts_failed_idx;
DROP INDEX IF EXISTS payouts_connector_idx;
DROP INDEX IF EXISTS sandbox_ledger_account_idx;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS booked_at;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS capture;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS account;
