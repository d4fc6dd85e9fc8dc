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
-- Order comparisons hold between two numbers or two strings only. Both
-- functions are PL/pgSQL, whose plans a session keeps: a SQL function with
-- a sub-select is planned again at every call, on the charge path.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION gh_webhook_filter_test(op text, v jsonb, arg jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    CASE op
    WHEN '$eq' THEN RETURN v IS NOT NULL AND v = arg;
    WHEN '$neq' THEN RETURN v IS NULL OR v <> arg;
    -- A list holds only scalars, so containment is membership.
    WHEN '$in' THEN RETURN v IS NOT NULL AND arg @> jsonb_build_array(v);
    WHEN '$nin' THEN RETURN v IS NULL OR NOT arg @> jsonb_build_array(v);
    WHEN '$exist' THEN RETURN (v IS NOT NULL) = (arg = 'true'::jsonb);
    ELSE
        IF jsonb_typeof(v) = 'number' AND jsonb_typeof(arg) = 'number' THEN
            CASE op
            WHEN '$gt' THEN RETURN v::numeric > arg::numeric;
            WHEN '$gte' THEN RETURN v::numeric >= arg::numeric;
            WHEN '$lt' THEN RETURN v::numeric < arg::numeric;
            WHEN '$lte' THEN RETURN v::numeric <= arg::numeric;
            ELSE RETURN false;
            END CASE;
        ELSIF jsonb_typeof(v) = 'string' AND jsonb_typeof(arg) = 'string' THEN
            CASE op
            WHEN '$gt' THEN RETURN (v #>> '{}') COLLATE "C" > (arg #>> '{}') COLLATE "C";
            WHEN '$gte' THEN RETURN (v #>> '{}') COLLATE "C" >= (arg #>> '{}') COLLATE "C";
            WHEN '$lt' THEN RETURN (v #>> '{}') COLLATE "C" < (arg #>> '{}') COLLATE "C";
            WHEN '$lte' THEN RETURN (v #>> '{}') COLLATE "C" <= (arg #>> '{}') COLLATE "C";
            ELSE RETURN false;
            END CASE;
        END IF;
        RETURN false;
    END CASE;
END
$$;
-- +goose StatementEnd

-- gh_webhook_filter_match reports whether an event body passes a filter:
-- every condition ({"dotted.path": {"$op": arg, ...}}) and every operator
-- of each holds. A NULL filter passes everything.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION gh_webhook_filter_match(filter jsonb, body jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    c record;
    o record;
    v jsonb;
BEGIN
    IF filter IS NULL THEN
        RETURN true;
    END IF;
    FOR c IN SELECT key, value FROM jsonb_each(filter) LOOP
        v := body #> string_to_array(c.key, '.');
        FOR o IN SELECT key, value FROM jsonb_each(c.value) LOOP
            IF NOT gh_webhook_filter_test(o.key, v, o.value) THEN
                RETURN false;
            END IF;
        END LOOP;
    END LOOP;
    RETURN true;
END
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
