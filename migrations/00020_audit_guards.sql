-- +goose Up
-- The audit log's guards (docs/audit.md). Migration 00013 made the entries
-- and anchors append-only; this guards what was left to the application's
-- own database role:
--
-- 1. audit_heads: a head starts at seq 0 with the zero hash and moves only
--    forward along its chain, one entry at a time, to the entry appended
--    after it; it is never deleted or truncated.
-- 2. Every month's partition is recorded as it is made
--    (audit_partition_months), and retention's drops are recorded: audit_partition_drops holds one row
--    per month dropped, written in the drop's transaction, and only for a
--    month that ended more than a year ago; the anchors (the last entry of
--    each chain in the month, audit_anchors) are written only with it and
--    must be that entry. Both are append-only.
-- 3. Where the migration runs as a superuser, an event trigger refuses any
--    DDL on the audit log's tables, partitions, triggers and functions:
--    DETACH PARTITION, DROP of a partition whose drop is not being
--    recorded, DISABLE TRIGGER, DROP TRIGGER, CREATE OR REPLACE FUNCTION...
--    Creating next months' partitions is allowed. Without a superuser the
--    event trigger cannot be created (a notice says so); `api audit verify`
--    still tells a month dropped unrecorded and a head moved back.

-- +goose StatementBegin
CREATE FUNCTION audit_heads_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.seq <> 0 OR NEW.hash <> decode(repeat('00', 32), 'hex') OR NEW.at <> '-infinity' THEN
            RAISE EXCEPTION 'audit_heads: a chain''s head starts at seq 0 with the zero hash'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.merchant_id <> OLD.merchant_id OR NEW.chain <> OLD.chain OR NEW.seq <> OLD.seq + 1 OR NEW.at < OLD.at
        OR NOT EXISTS (SELECT 1 FROM audit_log l WHERE l.merchant_id = NEW.merchant_id AND l.chain = NEW.chain
            AND l.seq = NEW.seq AND l.at = NEW.at AND l.hash = NEW.hash AND l.prev_hash = OLD.hash) THEN
        RAISE EXCEPTION 'audit_heads: a head only moves forward along its chain, to the entry appended after it (merchant %, chain %, seq % to %)',
            OLD.merchant_id, OLD.chain, OLD.seq, NEW.seq
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_heads_forward_only BEFORE INSERT OR UPDATE ON audit_heads
    FOR EACH ROW EXECUTE FUNCTION audit_heads_guard();
CREATE TRIGGER audit_heads_no_delete BEFORE DELETE ON audit_heads
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_heads_no_truncate BEFORE TRUNCATE ON audit_heads
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();

-- One row per month that retention dropped. month is the first instant of
-- the UTC month, partition its table's name.
CREATE TABLE audit_partition_drops (
    month      timestamptz NOT NULL PRIMARY KEY,
    partition  text        NOT NULL UNIQUE,
    dropped_at timestamptz NOT NULL DEFAULT now()
);
-- The month of the drop an anchor was written with (NULL before this
-- migration).
ALTER TABLE audit_anchors ADD COLUMN month timestamptz;

-- +goose StatementBegin
-- audit_drop_record_guard: a drop is recorded only for a month that ended
-- more than a year ago, under its partition's name, at the time of the
-- transaction that drops it.
CREATE FUNCTION audit_drop_record_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.dropped_at := now();
    IF NEW.month <> date_trunc('month', NEW.month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        OR NEW.partition <> 'audit_log_' || to_char(NEW.month AT TIME ZONE 'UTC', 'YYYY_MM')
        OR (NEW.month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC' > now() - interval '365 days' THEN
        RAISE EXCEPTION 'audit_partition_drops: only a month that ended more than a year ago is dropped (% %)', NEW.partition, NEW.month
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_partition_drops_record BEFORE INSERT ON audit_partition_drops
    FOR EACH ROW EXECUTE FUNCTION audit_drop_record_guard();
CREATE TRIGGER audit_partition_drops_append_only BEFORE UPDATE OR DELETE ON audit_partition_drops
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_partition_drops_no_truncate BEFORE TRUNCATE ON audit_partition_drops
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();

-- +goose StatementBegin
-- audit_anchor_guard: an anchor is written only with the drop of its month,
-- in that drop's transaction, and is the last entry of its chain there.
CREATE FUNCTION audit_anchor_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    hi timestamptz;
BEGIN
    hi := (NEW.month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
    IF NEW.month IS NULL
        OR NOT EXISTS (SELECT 1 FROM audit_partition_drops d WHERE d.month = NEW.month AND d.dropped_at = now())
        OR NOT EXISTS (SELECT 1 FROM audit_log l WHERE l.merchant_id = NEW.merchant_id AND l.chain = NEW.chain
            AND l.seq = NEW.seq AND l.at = NEW.at AND l.hash = NEW.hash AND l.at >= NEW.month AND l.at < hi)
        OR EXISTS (SELECT 1 FROM audit_log l WHERE l.merchant_id = NEW.merchant_id AND l.chain = NEW.chain
            AND l.seq > NEW.seq AND l.at >= NEW.month AND l.at < hi) THEN
        RAISE EXCEPTION 'audit_anchors: an anchor is the last entry of its chain in a month being dropped (merchant %, chain %, seq %)',
            NEW.merchant_id, NEW.chain, NEW.seq
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    NEW.dropped_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_anchors_record BEFORE INSERT ON audit_anchors
    FOR EACH ROW EXECUTE FUNCTION audit_anchor_guard();

-- Every monthly partition ever made, so that `api audit verify` knows each
-- month that must be there or recorded as dropped. Append-only; a row is
-- written only for a partition of audit_log that exists.
CREATE TABLE audit_partition_months (
    month      timestamptz NOT NULL PRIMARY KEY,
    partition  text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO audit_partition_months (month, partition)
SELECT to_date(substr(c.relname, 11), 'YYYY_MM')::timestamp AT TIME ZONE 'UTC', c.relname
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'audit_log'::regclass AND c.relname ~ '^audit_log_[0-9]{4}_[0-9]{2}$';

-- +goose StatementBegin
CREATE FUNCTION audit_month_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.created_at := now();
    IF NEW.partition <> 'audit_log_' || to_char(NEW.month AT TIME ZONE 'UTC', 'YYYY_MM')
        OR NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'audit_log'::regclass AND c.relname = NEW.partition) THEN
        RAISE EXCEPTION 'audit_partition_months: % is not a partition of the audit log', NEW.partition
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_partition_months_record BEFORE INSERT ON audit_partition_months
    FOR EACH ROW EXECUTE FUNCTION audit_month_guard();
CREATE TRIGGER audit_partition_months_append_only BEFORE UPDATE OR DELETE ON audit_partition_months
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_partition_months_no_truncate BEFORE TRUNCATE ON audit_partition_months
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();

-- +goose StatementBegin
-- audit_ensure_partitions creates the monthly partitions (UTC months) from
-- the month of p_from to p_months after it that do not exist yet, records
-- each in audit_partition_months, and returns how many it created.
CREATE OR REPLACE FUNCTION audit_ensure_partitions(p_from timestamptz, p_months int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    first timestamp := date_trunc('month', p_from AT TIME ZONE 'UTC');
    lo timestamp;
    name text;
    n int := 0;
BEGIN
    FOR i IN 0..p_months LOOP
        lo := first + make_interval(months => i);
        name := 'audit_log_' || to_char(lo, 'YYYY_MM');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF audit_log FOR VALUES FROM (%L) TO (%L)', name,
                lo AT TIME ZONE 'UTC', (lo + interval '1 month') AT TIME ZONE 'UTC');
            EXECUTE format('CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON %I '
                'FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse()', name);
            INSERT INTO audit_partition_months (month, partition) VALUES (lo AT TIME ZONE 'UTC', name)
                ON CONFLICT DO NOTHING;
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- audit_drop_before drops the monthly partitions that end at or before
-- p_cutoff (and more than a year ago), oldest first. Each drop is recorded
-- in its own transaction's audit_partition_drops, with the anchor of every
-- chain with entries in the month (its last entry there), before the DROP.
CREATE OR REPLACE FUNCTION audit_drop_before(p_cutoff timestamptz) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    part text;
    lo timestamptz;
    hi timestamptz;
    n int := 0;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'audit_log'::regclass AND c.relname ~ '^audit_log_[0-9]{4}_[0-9]{2}$'
        ORDER BY c.relname
    LOOP
        lo := to_date(substr(part, 11), 'YYYY_MM')::timestamp AT TIME ZONE 'UTC';
        hi := (lo AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
        EXIT WHEN hi > p_cutoff OR hi > now() - interval '365 days';
        INSERT INTO audit_partition_drops (month, partition) VALUES (lo, part);
        EXECUTE format('INSERT INTO audit_anchors (merchant_id, chain, seq, hash, at, month) '
            'SELECT h.merchant_id, h.chain, l.seq, l.hash, l.at, %L FROM audit_heads h '
            'CROSS JOIN LATERAL (SELECT seq, hash, at FROM %I p WHERE p.merchant_id = h.merchant_id '
            'AND p.chain = h.chain ORDER BY seq DESC LIMIT 1) l ON CONFLICT DO NOTHING', lo, part);
        EXECUTE format('DROP TABLE %I', part);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- audit_guarded_relation reports whether rel is one of the audit log's
-- relations (a table or partition or an index of one), whatever it is
-- named now: every one of them carries a trigger of the audit functions.
CREATE FUNCTION audit_guarded_relation(rel oid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
        WHERE t.tgrelid = coalesce((SELECT indrelid FROM pg_index WHERE indexrelid = rel), rel)
            AND p.proname IN ('audit_refuse', 'audit_heads_guard', 'audit_drop_record_guard', 'audit_anchor_guard', 'audit_month_guard'))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- audit_guarded_function reports whether fn is one of the audit log's
-- functions: named audit_..., or run by a trigger of the log's relations.
CREATE FUNCTION audit_guarded_function(fn oid) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_proc WHERE oid = fn AND proname LIKE 'audit\_%')
        OR EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgfoid = fn AND audit_guarded_relation(t.tgrelid))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- audit_guard_ddl refuses DDL on the audit log (the event trigger
-- audit_guard). Allowed: a new monthly partition (audit_ensure_partitions)
-- with its TRUNCATE trigger, and the DROP of a partition whose drop this
-- transaction recorded (audit_drop_before). A migration that changes the
-- audit log disables the event trigger around it, as a superuser:
-- ALTER EVENT TRIGGER audit_guard DISABLE; ... ENABLE.
CREATE FUNCTION audit_guard_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    tbl text;
BEGIN
    IF TG_EVENT = 'ddl_command_start' THEN
        -- A concurrent detach commits its first step before any later
        -- event: refuse it by its text.
        IF current_query() ~* 'detach\s+partition' AND current_query() ~* 'audit_' THEN
            RAISE EXCEPTION 'the audit log''s partitions are never detached' USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN;
    END IF;
    IF TG_EVENT = 'sql_drop' THEN
        FOR r IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
            IF r.object_type = 'table' AND r.object_name ~ '^audit_log_[0-9]{4}_[0-9]{2}$' THEN
                tbl := r.object_name;
            ELSIF r.object_type = 'trigger' THEN
                tbl := substring(r.object_identity FROM ' on (?:[^.]+\.)?(audit_[a-z0-9_]+)$');
                CONTINUE WHEN tbl IS NULL;
                IF tbl !~ '^audit_log_[0-9]{4}_[0-9]{2}$' THEN
                    RAISE EXCEPTION 'the audit log''s triggers cannot be dropped (%)', r.object_identity
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
            ELSIF r.object_type = 'table' AND r.object_name ~ '^audit_' THEN
                RAISE EXCEPTION 'the audit log''s tables cannot be dropped (%)', r.object_identity
                    USING ERRCODE = 'insufficient_privilege';
            ELSIF r.object_type = 'function' AND r.object_identity ~ '(^|\.)audit_' THEN
                RAISE EXCEPTION 'the audit log''s functions cannot be dropped (%)', r.object_identity
                    USING ERRCODE = 'insufficient_privilege';
            ELSE
                CONTINUE;
            END IF;
            IF NOT EXISTS (SELECT 1 FROM audit_partition_drops WHERE partition = tbl AND dropped_at = now()) THEN
                RAISE EXCEPTION 'the audit log''s partition % is dropped only by retention, which records the drop', tbl
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
        END LOOP;
        RETURN;
    END IF;
    FOR r IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
        IF r.classid = 'pg_class'::regclass AND audit_guarded_relation(r.objid) THEN
            -- A new month's partition, and the indexes it is made with.
            CONTINUE WHEN r.command_tag = 'CREATE TABLE'
                AND EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                    WHERE i.inhrelid = coalesce((SELECT indrelid FROM pg_index WHERE indexrelid = r.objid), r.objid)
                        AND i.inhparent = 'audit_log'::regclass AND c.relname ~ '^audit_log_[0-9]{4}_[0-9]{2}$');
        ELSIF r.classid = 'pg_class'::regclass AND r.command_tag = 'CREATE TABLE' THEN
            CONTINUE; -- a new partition before its triggers, or any other table
        ELSIF r.classid = 'pg_trigger'::regclass THEN
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.oid = r.objid
                AND (audit_guarded_relation(t.tgrelid) OR (SELECT relname FROM pg_class WHERE oid = t.tgrelid) ~ '^audit_'));
            CONTINUE WHEN r.command_tag = 'CREATE TRIGGER' AND EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                WHERE t.oid = r.objid AND t.tgname = 'audit_log_no_truncate' AND t.tgfoid = 'audit_refuse'::regproc
                    AND c.relname ~ '^audit_log_[0-9]{4}_[0-9]{2}$');
        ELSIF r.classid = 'pg_proc'::regclass THEN
            CONTINUE WHEN NOT audit_guarded_function(r.objid);
        ELSIF r.classid IN ('pg_rewrite'::regclass, 'pg_policy'::regclass) THEN
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_rewrite WHERE oid = r.objid AND audit_guarded_relation(ev_class))
                AND NOT EXISTS (SELECT 1 FROM pg_policy WHERE oid = r.objid AND audit_guarded_relation(polrelid));
        ELSE
            CONTINUE;
        END IF;
        RAISE EXCEPTION 'the audit log cannot be changed: % of % is refused', r.command_tag, r.object_identity
            USING ERRCODE = 'insufficient_privilege';
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The event triggers need a superuser. Without one, they are left out and
-- a notice says so (docs/audit.md).
DO $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        CREATE EVENT TRIGGER audit_guard ON ddl_command_end EXECUTE FUNCTION audit_guard_ddl();
        CREATE EVENT TRIGGER audit_guard_drop ON sql_drop EXECUTE FUNCTION audit_guard_ddl();
        CREATE EVENT TRIGGER audit_guard_detach ON ddl_command_start WHEN TAG IN ('ALTER TABLE')
            EXECUTE FUNCTION audit_guard_ddl();
    ELSE
        RAISE NOTICE 'audit log: % is not a superuser, so the event triggers that refuse DDL on the audit log are not created; run this migration as a superuser to have them (docs/audit.md)', current_user;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP EVENT TRIGGER IF EXISTS audit_guard_detach;
DROP EVENT TRIGGER IF EXISTS audit_guard_drop;
DROP EVENT TRIGGER IF EXISTS audit_guard;
DROP FUNCTION audit_guard_ddl();
DROP FUNCTION audit_guarded_function(oid);
DROP FUNCTION audit_guarded_relation(oid);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_drop_before(p_cutoff timestamptz) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    part text;
    hi timestamptz;
    n int := 0;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'audit_log'::regclass AND c.relname ~ '^audit_log_[0-9]{4}_[0-9]{2}$'
        ORDER BY c.relname
    LOOP
        hi := (to_timestamp(substr(part, 11), 'YYYY_MM')::timestamp + interval '1 month') AT TIME ZONE 'UTC';
        EXIT WHEN hi > p_cutoff;
        EXECUTE format('INSERT INTO audit_anchors (merchant_id, chain, seq, hash, at) '
            'SELECT h.merchant_id, h.chain, l.seq, l.hash, l.at FROM audit_heads h '
            'CROSS JOIN LATERAL (SELECT seq, hash, at FROM %I p WHERE p.merchant_id = h.merchant_id '
            'AND p.chain = h.chain ORDER BY seq DESC LIMIT 1) l ON CONFLICT DO NOTHING', part);
        EXECUTE format('DROP TABLE %I', part);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION audit_ensure_partitions(p_from timestamptz, p_months int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    first timestamp := date_trunc('month', p_from AT TIME ZONE 'UTC');
    lo timestamp;
    name text;
    n int := 0;
BEGIN
    FOR i IN 0..p_months LOOP
        lo := first + make_interval(months => i);
        name := 'audit_log_' || to_char(lo, 'YYYY_MM');
        IF to_regclass(name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF audit_log FOR VALUES FROM (%L) TO (%L)', name,
                lo AT TIME ZONE 'UTC', (lo + interval '1 month') AT TIME ZONE 'UTC');
            EXECUTE format('CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON %I '
                'FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse()', name);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd
DROP TABLE audit_partition_months;
DROP FUNCTION audit_month_guard();
DROP TRIGGER audit_anchors_record ON audit_anchors;
DROP FUNCTION audit_anchor_guard();
DROP TABLE audit_partition_drops;
DROP FUNCTION audit_drop_record_guard();
ALTER TABLE audit_anchors DROP COLUMN month;
DROP TRIGGER audit_heads_no_truncate ON audit_heads;
DROP TRIGGER audit_heads_no_delete ON audit_heads;
DROP TRIGGER audit_heads_forward_only ON audit_heads;
DROP FUNCTION audit_heads_guard();
