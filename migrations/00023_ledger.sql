-- +goose Up
-- The books (docs/ledger.md): every movement of a merchant's money is a
-- ledger transaction, one row of balance_transactions: the header the
-- merchant sees (a balance transaction, txn_...) and its entries, the
-- double entry, as two arrays of the same length: entry i moves amounts[i]
-- (signed, minor units) into the merchant's account accounts[i] at the
-- transaction's connector in its currency. The accounts:
--   balance     what the merchant is owed (its balance: available once
--               available_on has passed, pending before);
--   provider    what came in from or went back to cardholders through the
--               provider (captures, refunds, disputes);
--   fees        what the provider kept;
--   payouts     what was sent to the merchant's bank;
--   adjustments corrections decided by a person.
--
-- ledger_balanced, a CHECK, makes the database refuse a transaction whose
-- entries are fewer than two, hold a zero, name another account, do not
-- sum to zero, or do not move exactly its net (amount - fee) in the
-- balance account. A transaction's entries are written with it, in its one
-- row, and the triggers below refuse any UPDATE, DELETE or TRUNCATE: no
-- later statement can unbalance it.
--
-- cause is the booking's key, the state change that made it ('charge:<charge
-- id>', 'refund:<refund id>', 'payout:<po_...>', ...): unique per merchant,
-- so a retried task, a resent notification or a replayed request books
-- nothing twice.
-- +goose StatementBegin
CREATE FUNCTION ledger_balanced(accounts text[], amounts bigint[], net bigint) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    total bigint := 0;
    to_balance bigint := 0;
BEGIN
    -- Plain loops, no query: the check costs a few microseconds per row.
    IF array_ndims(amounts) IS DISTINCT FROM 1 OR array_ndims(accounts) IS DISTINCT FROM 1
        OR array_lower(amounts, 1) <> array_lower(accounts, 1) OR array_upper(amounts, 1) <> array_upper(accounts, 1)
        OR cardinality(amounts) < 2 THEN
        RETURN false;
    END IF;
    FOR i IN array_lower(amounts, 1) .. array_upper(amounts, 1) LOOP
        IF amounts[i] IS NULL OR amounts[i] = 0 OR accounts[i] IS NULL
            OR accounts[i] NOT IN ('balance', 'provider', 'fees', 'payouts', 'adjustments') THEN
            RETURN false;
        END IF;
        total := total + amounts[i];
        IF accounts[i] = 'balance' THEN
            to_balance := to_balance + amounts[i];
        END IF;
    END LOOP;
    RETURN total = 0 AND to_balance = net;
END
$$;
-- +goose StatementEnd
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
    accounts           text[] NOT NULL,
    amounts            bigint[] NOT NULL,
    PRIMARY KEY (merchant_id, id),
    CHECK (net = amount - fee),
    CONSTRAINT ledger_balanced CHECK (ledger_balanced(accounts, amounts, net))
);
CREATE UNIQUE INDEX balance_transactions_cause_key ON balance_transactions (merchant_id, cause);
-- The balance: the net of the merchant's transactions (what each moved in
-- its balance account), summed per currency and connector without reading
-- the heap.
CREATE INDEX balance_transactions_balance_idx ON balance_transactions (merchant_id, currency, connector_id)
    INCLUDE (net, available_on);

-- ledger_entries: the entries one per row, for reading.
CREATE VIEW ledger_entries AS
SELECT t.id AS txn_id, e.seq::smallint AS seq, t.merchant_id, t.connector_id, t.currency, e.account, e.amount, t.available_on
FROM balance_transactions t, unnest(t.accounts, t.amounts) WITH ORDINALITY AS e (account, amount, seq);

-- Append-only: corrections are reversing transactions, never edits.
-- +goose StatementBegin
CREATE FUNCTION ledger_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % is append-only; correct it with a reversing transaction', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd
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
DROP VIEW IF EXISTS ledger_entries;
DROP TABLE IF EXISTS balance_transactions;
DROP FUNCTION IF EXISTS ledger_refuse();
DROP FUNCTION IF EXISTS ledger_balanced(text[], bigint[], bigint);
