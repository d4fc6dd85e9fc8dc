-- +goose Up
CREATE TABLE charges (
    id                 uuid PRIMARY KEY,
    merchant_id        text NOT NULL REFERENCES merchants (id),
    environment        text NOT NULL CHECK (environment IN ('sandbox', 'live')),
    amount             bigint NOT NULL CHECK (amount > 0),
    amount_captured    bigint NOT NULL DEFAULT 0 CHECK (amount_captured >= 0 AND amount_captured <= amount),
    amount_refunded    bigint NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0),
    amount_refund_held bigint NOT NULL DEFAULT 0 CHECK (amount_refund_held >= 0),
    currency           char(3) NOT NULL,
    status             text NOT NULL CHECK (status IN ('created', 'authorized', 'captured', 'failed', 'voided', 'refunded')),
    pending_action     text CHECK (pending_action IN ('capture', 'void')),
    capture_amount     bigint,
    payment_method     text NOT NULL,
    capture            boolean NOT NULL,
    card_brand         text NOT NULL,
    card_last4         text,
    card_exp_month     int,
    card_exp_year      int,
    card_fingerprint   text,
    card_token         text,
    card_sealed        bytea,
    provider           text NOT NULL,
    provider_reference text,
    description        text,
    metadata           jsonb NOT NULL DEFAULT '{}',
    failure_code       text,
    failure_message    text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    CHECK (amount_refunded + amount_refund_held <= amount_captured)
);
CREATE INDEX charges_merchant_id_idx ON charges (merchant_id, id DESC);
CREATE INDEX charges_unsettled_idx ON charges (updated_at) WHERE status = 'created' OR pending_action IS NOT NULL;

CREATE TABLE refunds (
    id                 uuid PRIMARY KEY,
    merchant_id        text NOT NULL REFERENCES merchants (id),
    charge_id          uuid NOT NULL REFERENCES charges (id),
    amount             bigint NOT NULL CHECK (amount > 0),
    currency           char(3) NOT NULL,
    status             text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    reason             text CHECK (reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
    metadata           jsonb NOT NULL DEFAULT '{}',
    provider_reference text,
    failure_code       text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
CREATE INDEX refunds_merchant_id_idx ON refunds (merchant_id, id DESC);
CREATE INDEX refunds_charge_id_idx ON refunds (charge_id, id DESC);
CREATE INDEX refunds_pending_idx ON refunds (updated_at) WHERE status = 'pending';

-- events: the webhook body of every state change, written in the same
-- transaction as the change; kept 30 days.
CREATE TABLE events (
    id          uuid PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    environment text NOT NULL,
    type        text NOT NULL,
    body        json NOT NULL, -- json, not jsonb: the exact bytes delivered and signed
    created_at  timestamptz NOT NULL
);
CREATE INDEX events_merchant_id_idx ON events (merchant_id, id DESC);
CREATE INDEX events_merchant_type_idx ON events (merchant_id, type, id DESC);
CREATE INDEX events_created_at_idx ON events (created_at);

-- outbox: work the worker must do, written in the same transaction as the
-- state change that calls for it and deleted in the transaction that finishes
-- it. The relay enqueues a row right after commit; the sweeper re-enqueues rows
-- whose task went missing. task_id is the asynq TaskID, so duplicates are harmless.
CREATE TABLE outbox (
    task_id    text PRIMARY KEY,
    task_type  text NOT NULL,
    ref_id     uuid NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_created_at_idx ON outbox (created_at);

-- idempotency_keys: the first response to a POST with an Idempotency-Key,
-- stored in the transaction that creates the object; kept 24 hours. The
-- request fingerprint is an HMAC, so no card data can be recovered from it.
CREATE TABLE idempotency_keys (
    merchant_id   text NOT NULL REFERENCES merchants (id),
    key           text NOT NULL,
    fingerprint   bytea NOT NULL,
    status        int NOT NULL,
    response      bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, key)
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- sandbox_ledger: the books of the built-in sandbox provider, one row per
-- provider idempotency key, so it behaves like a real idempotent provider and
-- tests can count calls and provider-side charges.
CREATE TABLE sandbox_ledger (
    idempotency_key  text PRIMARY KEY,
    operation        text NOT NULL CHECK (operation IN ('authorize', 'capture', 'void', 'refund')),
    parent_reference text NOT NULL DEFAULT '',
    amount           bigint NOT NULL,
    currency         text NOT NULL DEFAULT '',
    reference        text,
    calls            bigint NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX sandbox_ledger_reference_key ON sandbox_ledger (reference) WHERE operation IN ('authorize', 'refund');

-- +goose Down
DROP TABLE sandbox_ledger;
DROP TABLE idempotency_keys;
DROP TABLE outbox;
DROP TABLE events;
DROP TABLE refunds;
DROP TABLE charges;
