-- +goose Up
-- Customers and their saved cards (payment methods), and cardholder
-- authentication (3-D Secure) of charges.
--
-- A payment method keeps its card sealed (AES-256-GCM, the method's id as
-- associated data) for as long as the method exists: deleting the method or
-- its customer deletes the row, sealed data included. A charge of a saved
-- card takes the card re-sealed under the charge's id, as a charge of a
-- token does, and purges it once the provider's answer is final.
CREATE TABLE customers (
    id          text PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    environment text NOT NULL CHECK (environment IN ('sandbox', 'live')),
    email       text,
    name        text,
    description text,
    metadata    jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX customers_merchant_idx ON customers (merchant_id, created_at DESC, id DESC);
CREATE INDEX customers_email_idx ON customers (merchant_id, lower(email)) WHERE email IS NOT NULL;

CREATE TABLE payment_methods (
    id               text PRIMARY KEY,
    merchant_id      text NOT NULL REFERENCES merchants (id),
    environment      text NOT NULL,
    customer_id      text NOT NULL REFERENCES customers (id) ON DELETE CASCADE,
    card_brand       text NOT NULL,
    card_last4       text NOT NULL,
    card_exp_month   int NOT NULL,
    card_exp_year    int NOT NULL,
    card_fingerprint text NOT NULL,
    card_sealed      bytea NOT NULL,
    -- The card token it was made from, if any: it lets the card field that
    -- collected the card show a challenge for the method's charges.
    token_id         text,
    -- When the cardholder first authenticated a charge of this card (3-D
    -- Secure): the issuer's mandate for later off-session charges.
    authenticated_at timestamptz,
    created_at       timestamptz NOT NULL
);
CREATE INDEX payment_methods_customer_idx ON payment_methods (customer_id, created_at DESC, id DESC);

-- A card token is used by a charge or by a payment method made from it.
ALTER TABLE card_tokens ADD COLUMN payment_method_id text;
ALTER TABLE card_tokens DROP CONSTRAINT card_tokens_check;
ALTER TABLE card_tokens ADD CONSTRAINT card_tokens_used_check
    CHECK ((used_at IS NULL) = (charge_id IS NULL AND payment_method_id IS NULL));

ALTER TABLE charges DROP CONSTRAINT charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('created', 'requires_action', 'authorized', 'captured', 'failed', 'voided', 'refunded'));
ALTER TABLE charges
    ADD COLUMN customer_id                 text,
    ADD COLUMN payment_method_id           text,
    ADD COLUMN off_session                 boolean NOT NULL DEFAULT false,
    ADD COLUMN return_url                  text,
    ADD COLUMN authentication_status       text NOT NULL DEFAULT 'not_required'
        CHECK (authentication_status IN ('not_required', 'pending', 'succeeded', 'failed')),
    ADD COLUMN authentication_completed_at timestamptz,
    -- The issuer's challenge page when the provider names one (Stripe);
    -- NULL when the gateway serves the challenge (the sandbox).
    ADD COLUMN next_action_url             text,
    -- Until when the cardholder may answer the challenge.
    ADD COLUMN action_expires_at           timestamptz,
    -- The cardholder's answer as the challenge page or the return from the
    -- issuer's page recorded it, for the worker to settle: succeeded, failed,
    -- or returned (the provider knows the answer).
    ADD COLUMN action_answer               text CHECK (action_answer IN ('succeeded', 'failed', 'returned'));
CREATE INDEX charges_customer_idx ON charges (merchant_id, customer_id, created_at DESC, id DESC) WHERE customer_id IS NOT NULL;
CREATE INDEX charges_requires_action_idx ON charges (action_expires_at) WHERE status = 'requires_action';

ALTER TABLE sandbox_ledger DROP CONSTRAINT sandbox_ledger_operation_check;
ALTER TABLE sandbox_ledger ADD CONSTRAINT sandbox_ledger_operation_check
    CHECK (operation IN ('authorize', 'authenticate', 'capture', 'void', 'refund'));

-- +goose Down
ALTER TABLE sandbox_ledger DROP CONSTRAINT sandbox_ledger_operation_check;
DELETE FROM sandbox_ledger WHERE operation = 'authenticate';
ALTER TABLE sandbox_ledger ADD CONSTRAINT sandbox_ledger_operation_check
    CHECK (operation IN ('authorize', 'capture', 'void', 'refund'));
DROP INDEX charges_requires_action_idx;
DROP INDEX charges_customer_idx;
ALTER TABLE charges
    DROP COLUMN customer_id, DROP COLUMN payment_method_id, DROP COLUMN off_session, DROP COLUMN return_url,
    DROP COLUMN authentication_status, DROP COLUMN authentication_completed_at, DROP COLUMN next_action_url,
    DROP COLUMN action_expires_at, DROP COLUMN action_answer;
ALTER TABLE charges DROP CONSTRAINT charges_status_check;
UPDATE charges SET status = 'failed' WHERE status = 'requires_action';
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('created', 'authorized', 'captured', 'failed', 'voided', 'refunded'));
DELETE FROM card_tokens WHERE payment_method_id IS NOT NULL;
ALTER TABLE card_tokens DROP CONSTRAINT card_tokens_used_check;
ALTER TABLE card_tokens ADD CONSTRAINT card_tokens_check CHECK ((used_at IS NULL) = (charge_id IS NULL));
ALTER TABLE card_tokens DROP COLUMN payment_method_id;
DROP TABLE payment_methods;
DROP TABLE customers;
