-- +goose NO TRANSACTION
-- +goose Up
-- Filters on the event body and operational events about endpoints
-- (docs/webhooks.md). Each statement commits on its own and may run again.

-- filter: the endpoint's conditions on the event body, as the API stored
-- them after checking them (NULL: every subscribed event is delivered).
-- health_announced: a webhook_endpoint.failing or .disabled event was sent
-- about the endpoint's current trouble, so its next success sends
-- webhook_endpoint.recovered.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS filter jsonb;
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS health_announced boolean NOT NULL DEFAULT false;
-- event_seq numbers the operational events about the endpoint.
ALTER TABLE webhook_endpoints ADD COLUMN IF NOT EXISTS event_seq int NOT NULL DEFAULT 0;
-- The worker's sweep of failing endpoints not yet announced.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_endpoints_failing_idx ON webhook_endpoints (failing_since)
    WHERE failing_since IS NOT NULL AND NOT health_announced AND active AND deleted_at IS NULL;

-- A delivery whose event the endpoint's filter turned away is written
-- 'filtered': never sent, kept in the log and counted like the others.
-- The wider check is added NOT VALID (no scan under the exclusive lock that
-- blocks deliveries) and validated after, under a lock that lets them run:
-- every row meets it already.
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'succeeded', 'failed', 'filtered')) NOT VALID;
ALTER TABLE webhook_deliveries VALIDATE CONSTRAINT webhook_deliveries_status_check;

-- gh_webhook_filter_test applies one operator of a filter condition to the
-- value v found at the condition's path (SQL NULL when the path is absent).
-- Order comparisons hold between two numbers or two strings only.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION gh_webhook_filter_test(op text, v jsonb, arg jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE op
        WHEN '$eq' THEN v IS NOT NULL AND v = arg
        WHEN '$neq' THEN v IS NULL OR v <> arg
        WHEN '$in' THEN v IS NOT NULL AND EXISTS (SELECT 1 FROM jsonb_array_elements(arg) AS e (x) WHERE e.x = v)
        WHEN '$nin' THEN v IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(arg) AS e (x) WHERE e.x = v)
        WHEN '$exist' THEN (v IS NOT NULL) = (arg = 'true'::jsonb)
        ELSE coalesce(CASE
            WHEN jsonb_typeof(v) = 'number' AND jsonb_typeof(arg) = 'number' THEN CASE op
                WHEN '$gt' THEN v::numeric > arg::numeric
                WHEN '$gte' THEN v::numeric >= arg::numeric
                WHEN '$lt' THEN v::numeric < arg::numeric
                WHEN '$lte' THEN v::numeric <= arg::numeric END
            WHEN jsonb_typeof(v) = 'string' AND jsonb_typeof(arg) = 'string' THEN CASE op
                WHEN '$gt' THEN (v #>> '{}') COLLATE "C" > (arg #>> '{}') COLLATE "C"
                WHEN '$gte' THEN (v #>> '{}') COLLATE "C" >= (arg #>> '{}') COLLATE "C"
                WHEN '$lt' THEN (v #>> '{}') COLLATE "C" < (arg #>> '{}') COLLATE "C"
                WHEN '$lte' THEN (v #>> '{}') COLLATE "C" <= (arg #>> '{}') COLLATE "C" END
            END, false)
    END
$$;
-- +goose StatementEnd

-- gh_webhook_filter_match reports whether an event body passes a filter:
-- every condition ({"dotted.path": {"$op": arg, ...}}) and every operator
-- of each holds. A NULL filter passes everything.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION gh_webhook_filter_match(filter jsonb, body jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT filter IS NULL OR NOT EXISTS (
        SELECT 1 FROM jsonb_each(filter) AS c (path, cond), jsonb_each(c.cond) AS o (op, arg)
        WHERE NOT gh_webhook_filter_test(o.op, body #> string_to_array(c.path, '.'), o.arg))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS gh_webhook_filter_match(jsonb, jsonb);
DROP FUNCTION IF EXISTS gh_webhook_filter_test(text, jsonb, jsonb);
DELETE FROM webhook_deliveries WHERE status = 'filtered';
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check
    CHECK (status IN ('pending', 'succeeded', 'failed'));
DROP INDEX CONCURRENTLY IF EXISTS webhook_endpoints_failing_idx;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS event_seq;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS health_announced;
ALTER TABLE webhook_endpoints DROP COLUMN IF EXISTS filter;
