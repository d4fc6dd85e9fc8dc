-- +goose NO TRANSACTION
-- +goose Up
-- Adyen connectors, and the two statuses of a provider that settles
-- captures and voids by notification: capturing and voiding, until the
-- notification comes. Each check is added NOT VALID and validated after, which
-- does not block writes; the statements run outside a transaction.
ALTER TABLE connectors DROP CONSTRAINT IF EXISTS connectors_provider_check;
ALTER TABLE connectors ADD CONSTRAINT connectors_provider_check
    CHECK (provider IN ('sandbox', 'stripe', 'adyen')) NOT VALID;
ALTER TABLE connectors VALIDATE CONSTRAINT connectors_provider_check;
ALTER TABLE charges DROP CONSTRAINT IF EXISTS charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('created', 'requires_action', 'authorized', 'capturing', 'voiding', 'captured', 'failed', 'voided', 'refunded')) NOT VALID;
ALTER TABLE charges VALIDATE CONSTRAINT charges_status_check;
-- action_details: what the provider's challenge page sent the cardholder
-- back with (Adyen's redirectResult), for the worker's call that settles
-- the authentication.
ALTER TABLE charges ADD COLUMN IF NOT EXISTS action_details jsonb;

-- +goose Down
ALTER TABLE charges DROP COLUMN IF EXISTS action_details;
ALTER TABLE charges DROP CONSTRAINT IF EXISTS charges_status_check;
ALTER TABLE charges ADD CONSTRAINT charges_status_check
    CHECK (status IN ('created', 'requires_action', 'authorized', 'captured', 'failed', 'voided', 'refunded'));
ALTER TABLE connectors DROP CONSTRAINT IF EXISTS connectors_provider_check;
ALTER TABLE connectors ADD CONSTRAINT connectors_provider_check
    CHECK (provider IN ('sandbox', 'stripe'));
