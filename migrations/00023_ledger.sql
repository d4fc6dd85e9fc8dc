-- +goose Up
-- The books (docs/ledger.md): every movement of a merchant's money is a
-- ledger transaction, its header a balance transaction (txn_...) and its
-- entries rows of ledger_entries that sum to zero per transaction.
--
-- balance_transactions: the header the merchant sees. cause is the booking's
-- key, the state change that made it ('charge:<charge id>', 'refund:<refund
-- id>', 'payout:<po_...>', ...): unique per merchant, so a retried task, a
-- resent notification or a replayed request books nothing twice.
-- net = amount - fee, and net is what the entries move in and out of the
-- merchant's balance account (checked by ledger_check below).
CREATE TABLE balance_transactions (
    id                 text NOT NULL,
    merchant_id        text NOT NULL,
    connector_id       text NOT NULL,
    currency           text NOT NULL,
    type               text NOT NULL CHECK (type IN ('charge', 'refund', 'dispute', 'dispute_reversal', 'payout',
                                                     'payout_failure', 'adjustment')),
    source             text NOT NULL,
    cause              text NOT NULL,
    amount             bigint NOT NULL,
    fee                bigint NOT NULL,
    net                bigint NOT NULL,
    fee_details        jsonb NOT NULL DEFAULT '[]',
    -- The provider reports the fee later (Adyen, with settlement): fee is 0
    -- until a transaction of the fee is booked with the same source.
    fee_pending        boolean NOT NULL DEFAULT false,
    provider_reference text,
    available_on       timestamptz NOT NULL,
    created_at         timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, id),
    CHECK (net = amount - fee)
);
CREATE UNIQUE INDEX balance_transactions_cause_key ON balance_transactions (merchant_id, cause);

-- ledger_entries: the double entry. Each row moves amount (signed, minor
-- units) into one of the merchant's accounts at one connector in one
-- currency:
--   balance   what the merchant is owed (its balance: available once
--             available_on has passed, pending before);
--   provider  what came in from or went back to cardholders through the
--             provider (captures, refunds, disputes);
--   fees      what the provider kept;
--   payouts   what was sent to the merchant's bank;
--   adjustments corrections decided by a person.
CREATE TABLE ledger_entries (
    txn_id       text NOT NULL,
    seq          smallint NOT NULL,
    merchant_id  text NOT NULL,
    connector_id text NOT NULL,
    currency     text NOT NULL,
    account      text NOT NULL CHECK (account IN ('balance', 'provider', 'fees', 'payouts', 'adjustments')),
    amount       bigint NOT NULL CHECK (amount <> 0),
    available_on timestamptz NOT NULL,
    PRIMARY KEY (txn_id, seq)
);
-- The balance: the merchant's balance-account entries, summed per currency
-- and connector without reading the heap.
CREATE INDEX ledger_entries_balance_idx ON ledger_entries (merchant_id, currency, connector_id)
    INCLUDE (amount, available_on) WHERE account = 'balance';

-- ledger_check runs once per statement that writes entries, after it:
-- every transaction the statement touched has a header written by the same
-- database transaction, and at least two entries, all of its merchant,
-- connector and currency, summing to zero and moving its net in the balance
-- account. ledger_check_headers refuses a header whose statement wrote no
-- entries. So a transaction's header and entries are written together, and
-- nothing written later can unbalance it: entries are append-only, and an
-- entry added to a transaction committed before is refused.
-- +goose StatementBegin
CREATE FUNCTION ledger_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    SELECT c.txn_id INTO bad
    FROM (SELECT DISTINCT merchant_id, txn_id FROM changed) c
    LEFT JOIN balance_transactions t ON t.merchant_id = c.merchant_id AND t.id = c.txn_id
    LEFT JOIN LATERAL (
        SELECT count(*) AS n, coalesce(sum(e.amount), 0) AS total,
               coalesce(sum(e.amount) FILTER (WHERE e.account = 'balance'), 0) AS to_balance,
               bool_and(e.merchant_id = t.merchant_id AND e.connector_id = t.connector_id
                        AND e.currency = t.currency) AS same
        FROM ledger_entries e WHERE e.txn_id = c.txn_id
    ) s ON true
    WHERE t.id IS NULL OR t.xmin <> pg_current_xact_id()::xid
        OR s.n < 2 OR s.total <> 0 OR s.to_balance <> t.net OR NOT s.same
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: transaction % does not balance (its entries must sum to zero, move its net in the balance account, and be written with its header)', bad
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION ledger_check_headers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_headers h
               WHERE NOT EXISTS (SELECT 1 FROM ledger_entries e WHERE e.txn_id = h.id)) THEN
        RAISE EXCEPTION 'ledger: a balance transaction is written with its entries, in one statement'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION ledger_check();
CREATE TRIGGER balance_transactions_have_entries AFTER INSERT ON balance_transactions
    REFERENCING NEW TABLE AS new_headers FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_headers();

-- Append-only: corrections are reversing transactions, never edits.
-- +goose StatementBegin
CREATE FUNCTION ledger_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % is append-only; correct it with a reversing transaction', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse();
CREATE TRIGGER balance_transactions_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON balance_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse();

-- payouts (po_...): money sent from a connector's available balance to the
-- merchant's bank. automatic: made by the connector's schedule, and then
-- payout_settlements names the balance transactions it paid out.
CREATE TABLE payouts (
    id                 text PRIMARY KEY,
    merchant_id        text NOT NULL,
    environment        text NOT NULL,
    connector_id       text NOT NULL,
    currency           text NOT NULL,
    amount             bigint NOT NULL CHECK (amount > 0),
    status             text NOT NULL CHECK (status IN ('pending', 'in_transit', 'paid', 'failed')),
    automatic          boolean NOT NULL,
    description        text,
    failure_code       text,
    failure_message    text,
    provider_reference text,
    arrival_date       timestamptz NOT NULL,
    -- An automatic payout's slot of its schedule (its day): one per
    -- connector, currency and slot, whichever worker makes it.
    schedule_slot      timestamptz,
    event_seq          int NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
CREATE INDEX payouts_merchant_idx ON payouts (merchant_id, id DESC);
CREATE INDEX payouts_open_idx ON payouts (updated_at) WHERE status IN ('pending', 'in_transit');
CREATE UNIQUE INDEX payouts_schedule_slot_key ON payouts (connector_id, currency, schedule_slot) WHERE schedule_slot IS NOT NULL;
CREATE UNIQUE INDEX payouts_provider_reference_key ON payouts (connector_id, provider_reference) WHERE provider_reference IS NOT NULL;

-- payout_settlements: which automatic payout paid out each balance
-- transaction (the payout's own transaction names the payout itself).
-- Insert-only, like the books.
CREATE TABLE payout_settlements (
    merchant_id text NOT NULL,
    txn_id      text NOT NULL,
    payout_id   text NOT NULL,
    PRIMARY KEY (merchant_id, txn_id)
);
CREATE INDEX payout_settlements_payout_idx ON payout_settlements (payout_id);

-- A connector's terms: its fee schedule ({"percent_bps", "fixed"}; NULL is
-- the default for its provider) and its payout schedule.
ALTER TABLE connectors ADD COLUMN fees jsonb;
ALTER TABLE connectors ADD COLUMN payout_schedule text NOT NULL DEFAULT 'daily'
    CHECK (payout_schedule IN ('manual', 'daily'));

-- +goose Down
ALTER TABLE connectors DROP COLUMN IF EXISTS payout_schedule;
ALTER TABLE connectors DROP COLUMN IF EXISTS fees;
DROP TABLE IF EXISTS payout_settlements;
DROP TABLE IF EXISTS payouts;
DROP TABLE IF EXISTS ledger_entries;
DROP TABLE IF EXISTS balance_transactions;
DROP FUNCTION IF EXISTS ledger_refuse();
DROP FUNCTION IF EXISTS ledger_check_headers();
DROP FUNCTION IF EXISTS ledger_check();
