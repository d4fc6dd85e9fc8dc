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

-- reconciliations (rec_...): one comparison of a connector's settlement
-- report (uploaded, or fetched from the provider for a day) with the
-- books of the days it covers, and its counts. open_exceptions falls as
-- exceptions are resolved.
CREATE TABLE reconciliations (
    id                  text PRIMARY KEY,
    merchant_id         text NOT NULL,
    connector_id        text NOT NULL,
    source              text NOT NULL CHECK (source IN ('upload', 'provider')),
    dates               date[] NOT NULL CHECK (cardinality(dates) > 0),
    lines               int NOT NULL,
    matched             int NOT NULL,
    missing_in_gateway  int NOT NULL,
    missing_at_provider int NOT NULL,
    amount_mismatch     int NOT NULL,
    fee_mismatch        int NOT NULL,
    open_exceptions     int NOT NULL CHECK (open_exceptions >= 0),
    created_at          timestamptz NOT NULL
);
CREATE INDEX reconciliations_merchant_idx ON reconciliations (merchant_id, id DESC);

-- reconciliation_exceptions (exc_...): what a reconciliation found to
-- differ, one row per line key (provider reference, type, currency), with
-- both sides (NULL for the side that has nothing). A person resolves it:
-- adjust (adjustment_id names the balance transaction booked for the
-- difference, NULL when there was none) or accept. Never resolved by
-- itself, and never reopened.
CREATE TABLE reconciliation_exceptions (
    id                  text PRIMARY KEY,
    merchant_id         text NOT NULL,
    reconciliation_id   text NOT NULL REFERENCES reconciliations (id),
    connector_id        text NOT NULL,
    kind                text NOT NULL CHECK (kind IN ('missing_in_gateway', 'missing_at_provider', 'amount_mismatch', 'fee_mismatch')),
    provider_reference  text NOT NULL,
    type                text NOT NULL,
    currency            text NOT NULL,
    line                int,
    gateway_object      text,
    gateway_transaction text,
    provider_gross      bigint,
    provider_fee        bigint,
    provider_net        bigint,
    gateway_gross       bigint,
    gateway_fee         bigint,
    gateway_net         bigint,
    status              text NOT NULL CHECK (status IN ('open', 'resolved')),
    action              text CHECK (action IN ('adjust', 'accept')),
    note                text,
    adjustment_id       text,
    resolved_at         timestamptz,
    created_at          timestamptz NOT NULL,
    CHECK ((status = 'open') = (action IS NULL AND resolved_at IS NULL)),
    CHECK (adjustment_id IS NULL OR action = 'adjust')
);
CREATE INDEX reconciliation_exceptions_run_idx ON reconciliation_exceptions (reconciliation_id, id DESC);
-- Which exception an adjustment resolved: its line's type, when a later
-- reconciliation counts the adjustment with its line.
CREATE INDEX reconciliation_exceptions_adjustment_idx ON reconciliation_exceptions (merchant_id, adjustment_id)
    WHERE adjustment_id IS NOT NULL;

-- The books a reconciliation compares: a connector's transactions by the
-- day they became available (one more index entry per booking), and its
-- adjustments by reference, whenever booked.
CREATE INDEX balance_transactions_available_idx ON balance_transactions (merchant_id, connector_id, available_on);
CREATE INDEX balance_transactions_adjustments_idx ON balance_transactions (merchant_id, connector_id, provider_reference)
    WHERE type = 'adjustment';

-- +goose Down
DROP INDEX IF EXISTS balance_transactions_adjustments_idx;
DROP INDEX IF EXISTS balance_transactions_available_idx;
DROP TABLE IF EXISTS reconciliation_exceptions;
DROP TABLE IF EXISTS reconciliations;
DROP INDEX IF EXISTS payouts_failed_idx;
DROP INDEX IF EXISTS payouts_connector_idx;
DROP INDEX IF EXISTS sandbox_ledger_account_idx;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS booked_at;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS capture;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS account;
