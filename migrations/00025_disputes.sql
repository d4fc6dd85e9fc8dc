-- +goose Up
-- Disputes (docs/disputes.md): a cardholder's chargeback or inquiry, as its
-- provider reports it by notification, with the evidence the merchant
-- stages and submits, and what it moved in the books.

-- disputes (dp_...): one per provider dispute. Two parts of its state only
-- ever move forward, each on its own, so notifications applied in any
-- order, any number of times, end in the same row:
--   rank/status: how far its life has gone (docs/disputes.md, "How a
--   dispute's state is kept");
--   funds_phase: how often its money moved, 0 none, odd withdrawn, even
--   reinstated; withdrawals and reinstatements are booked once per phase.
CREATE TABLE disputes (
    id                    text PRIMARY KEY,
    merchant_id           text NOT NULL REFERENCES merchants (id),
    environment           text NOT NULL,
    charge_id             uuid NOT NULL REFERENCES charges (id),
    connector_id          text NOT NULL,
    provider              text NOT NULL,
    provider_reference    text NOT NULL,
    amount                bigint NOT NULL CHECK (amount > 0),
    currency              char(3) NOT NULL,
    reason                text NOT NULL,
    status                text NOT NULL CHECK (status IN ('warning_needs_response', 'warning_under_review', 'warning_closed',
                              'needs_response', 'under_review', 'won', 'lost')),
    rank                  int NOT NULL,
    funds_phase           int NOT NULL DEFAULT 0 CHECK (funds_phase >= 0),
    fee                   bigint NOT NULL DEFAULT 0 CHECK (fee >= 0),
    -- The evidence staged or submitted: text fields by name.
    evidence              jsonb NOT NULL DEFAULT '{}',
    evidence_submitted_at timestamptz,
    evidence_due_by       timestamptz NOT NULL,
    evidence_due_reported boolean NOT NULL DEFAULT false,
    -- The merchant accepted the loss (POST /v1/disputes/:id/close).
    closed_by_merchant    boolean NOT NULL DEFAULT false,
    event_seq             int NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL
);
CREATE UNIQUE INDEX disputes_provider_reference_key ON disputes (connector_id, provider_reference);
CREATE INDEX disputes_merchant_idx ON disputes (merchant_id, id DESC);
CREATE INDEX disputes_charge_idx ON disputes (charge_id);
-- The disputes waiting for the merchant, by deadline (the dashboard, and
-- the alert's count).
CREATE INDEX disputes_due_idx ON disputes (evidence_due_by)
    WHERE status IN ('needs_response', 'warning_needs_response');

-- The sandbox's own books of its disputes: the test cards that are
-- disputed record their reason on the authorization; a capture of such an
-- authorization opens a dispute here, and the evidence the gateway sends
-- decides it once decide_at has come.
ALTER TABLE sandbox_ledger ADD COLUMN dispute text;
CREATE TABLE sandbox_disputes (
    reference        text PRIMARY KEY,
    parent_reference text NOT NULL UNIQUE,
    account          text NOT NULL,
    amount           bigint NOT NULL,
    currency         text NOT NULL,
    reason           text NOT NULL,
    inquiry          boolean NOT NULL,
    status           text NOT NULL,
    evidence_outcome text,
    decide_at        timestamptz,
    due_by           timestamptz NOT NULL,
    created_at       timestamptz NOT NULL
);
CREATE INDEX sandbox_disputes_due_idx ON sandbox_disputes (decide_at) WHERE decide_at IS NOT NULL;

-- +goose Down
DROP TABLE IF EXISTS sandbox_disputes;
ALTER TABLE sandbox_ledger DROP COLUMN IF EXISTS dispute;
DROP TABLE IF EXISTS disputes;
