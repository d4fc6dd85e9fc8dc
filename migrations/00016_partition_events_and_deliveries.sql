-- +goose NO TRANSACTION
-- +goose Up
-- events, webhook_deliveries and webhook_attempts become partitioned by
-- range of their UUIDv7 ids (webhook_attempts on delivery_id, with the
-- bounds of its delivery's partition), so that retention drops a whole
-- partition instead of deleting rows. Every id of these tables is a UUIDv7
-- (ids.NewUUID, gh_uuid_v7), whose first 48 bits are its millisecond: a
-- range of ids is a range of time. The tables keep their names, columns,
-- primary keys and indexes, so every statement of this release and of the
-- previous one runs unchanged. The worker creates the partitions ahead and
-- drops those past their retention (store.MaintainPartitions); a DEFAULT
-- partition takes the rows no partition covers, so a write never fails for
-- want of one.
--
-- An existing table is not copied: it is renamed and attached whole as the
-- first partition, for ids below a boundary one to two days ahead (rows
-- written until then go there too), and dropped once all of it is past
-- retention. The attach does not read the table, because a CHECK constraint
-- proves its bound, added NOT VALID (a moment's lock) and validated while
-- writes go on; its indexes become the partitions of the new table's
-- indexes as they are, not rebuilt. The exclusive lock of the swap is held
-- for catalog changes only (docs/deploy.md has the figures). An empty
-- table (a new database) is dropped and created anew instead.

-- gh_uuid_floor is the least UUID of t's millisecond: every UUIDv7 made at
-- t or later sorts at or after it. The partitions' bounds.
CREATE OR REPLACE FUNCTION gh_uuid_floor(t timestamptz) RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid;

-- 1. The bound, NOT VALID: checked on every row written from now on, not
-- on the rows already there. Each table takes a moment's exclusive lock in
-- a transaction of its own, so the migration never holds one table's lock
-- while it waits for another's (a reader of deliveries that then reads
-- events would deadlock with it). It waits at most 200 ms at a time, less
-- than the server's deadlock_timeout, so that writers never queue behind
-- it for long and the migration, not the application, gives way.
-- +goose StatementBegin
CREATE FUNCTION gh_legacy_bound(p_name text, p_key text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bound uuid := gh_uuid_floor(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days');
    tries int := 0;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = p_name::regclass) <> 'r'
        OR EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = p_name::regclass AND conname = p_name || '_legacy_bound') THEN
        RETURN;
    END IF;
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I < %L::uuid) NOT VALID',
                p_name, p_name || '_legacy_bound', p_key, bound);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            tries := tries + 1;
            IF tries >= 300 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.1 + random() * 0.2);
        END;
    END LOOP;
END
$$;
-- +goose StatementEnd
SELECT gh_legacy_bound('events', 'id');
SELECT gh_legacy_bound('webhook_deliveries', 'id');
SELECT gh_legacy_bound('webhook_attempts', 'delivery_id');
DROP FUNCTION gh_legacy_bound(text, text);

-- 2. Validation reads each table under a SHARE UPDATE EXCLUSIVE lock, which
-- lets reads and writes go on. One statement per table, so one transaction
-- each.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'events_legacy_bound' AND NOT convalidated) THEN
        ALTER TABLE events VALIDATE CONSTRAINT events_legacy_bound;
    END IF;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'webhook_deliveries_legacy_bound' AND NOT convalidated) THEN
        ALTER TABLE webhook_deliveries VALIDATE CONSTRAINT webhook_deliveries_legacy_bound;
    END IF;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'webhook_attempts_legacy_bound' AND NOT convalidated) THEN
        ALTER TABLE webhook_attempts VALIDATE CONSTRAINT webhook_attempts_legacy_bound;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- gh_partition_swap turns the plain table p_name into a table partitioned
-- by range of p_key with the same columns, defaults, checks and indexes.
-- With p_bound, the old table is attached as the partition of ids below
-- it (p_name_legacy); without, the old table is dropped. The caller holds
-- the table's exclusive lock.
CREATE FUNCTION gh_partition_swap(p_name text, p_key text, p_bound uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    legacy text := p_name || '_legacy';
    defs text[];
    cons text[];
    ix record;
    d text;
BEGIN
    -- The indexes of the old table, to be made again on the new one under
    -- the same names: those of constraints (the primary key) as
    -- constraints, the others as they were created.
    SELECT coalesce(array_agg(format('ALTER TABLE %I ADD CONSTRAINT %I %s', p_name, c.conname, pg_get_constraintdef(c.oid))), '{}')
    INTO cons FROM pg_constraint c WHERE c.conrelid = p_name::regclass AND c.contype IN ('p', 'u');
    SELECT coalesce(array_agg(pg_get_indexdef(i.indexrelid)), '{}') INTO defs
    FROM pg_index i WHERE i.indrelid = p_name::regclass
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', p_name, legacy);
    FOR ix IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = legacy::regclass LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.relname, ix.relname || '_legacy');
    END LOOP;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE) PARTITION BY RANGE (%I)',
        p_name, legacy, p_key);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT IF EXISTS %I', p_name, p_name || '_legacy_bound');
    FOREACH d IN ARRAY cons LOOP
        EXECUTE d;
    END LOOP;
    FOREACH d IN ARRAY defs LOOP
        -- pg_get_indexdef names the table as public.<p_name>: now the
        -- partitioned one.
        EXECUTE d;
    END LOOP;
    IF p_bound IS NULL THEN
        EXECUTE format('DROP TABLE %I', legacy);
    ELSE
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', p_name, legacy, p_bound);
    END IF;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', p_name || '_default', p_name);
END
$$;
-- +goose StatementEnd

-- 3. The swap, in one transaction under the three tables' exclusive locks
-- (waited for 200 ms at a time, as above): renames, the new tables, the
-- attach, checked by the validated bound rather than by reading rows.
-- Deliveries and their attempts are attached (or made anew) together, so
-- that their partitions always have the same bounds: attempts reference
-- their delivery partition by partition (the old tables' foreign key
-- stays between the two old partitions), and a partition pair is dropped
-- without looking at any other.
-- +goose StatementBegin
DO $$
DECLARE
    tries int := 0;
    bound uuid;
    keep_events boolean;
    keep_deliveries boolean;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'events'::regclass) = 'p' THEN
        RETURN;
    END IF;
    LOOP
        BEGIN
            -- As in step 1: a short wait, under deadlock_timeout, so
            -- that a reader holding one of the tables and wanting another
            -- makes the migration retry rather than fail itself.
            PERFORM set_config('lock_timeout', '200ms', true);
            LOCK TABLE events, webhook_deliveries, webhook_attempts IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            tries := tries + 1;
            IF tries >= 300 THEN
                RAISE;
            END IF;
            PERFORM pg_sleep(0.1 + random() * 0.2);
        END;
    END LOOP;
    -- The bound the constraints carry; without one (the table was empty at
    -- step 1 and got rows since), the attach reads the few rows to check.
    SELECT substring(pg_get_constraintdef(oid) FROM '''([0-9a-f-]{36})''')::uuid INTO bound
    FROM pg_constraint WHERE conname IN ('events_legacy_bound', 'webhook_deliveries_legacy_bound') LIMIT 1;
    bound := coalesce(bound, gh_uuid_floor(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days'));
    keep_events := EXISTS (SELECT 1 FROM events);
    keep_deliveries := EXISTS (SELECT 1 FROM webhook_deliveries);
    PERFORM gh_partition_swap('events', 'id', CASE WHEN keep_events THEN bound END);
    IF keep_deliveries THEN
        PERFORM gh_partition_swap('webhook_deliveries', 'id', bound);
        PERFORM gh_partition_swap('webhook_attempts', 'delivery_id', bound);
    ELSE
        -- Attempts first: the old ones reference the old deliveries.
        PERFORM gh_partition_swap('webhook_attempts', 'delivery_id', NULL);
        PERFORM gh_partition_swap('webhook_deliveries', 'id', NULL);
    END IF;
    -- The DEFAULT partitions pair up like the others.
    ALTER TABLE webhook_attempts_default ADD CONSTRAINT webhook_attempts_default_delivery_fkey
        FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries_default (id) ON DELETE CASCADE;
END
$$;
-- +goose StatementEnd

DROP FUNCTION gh_partition_swap(text, text, uuid);

-- +goose Down
-- Back to plain tables, by copy (a development convenience: the copy holds
-- the tables' locks for as long as it takes).
-- +goose StatementBegin
DO $$
DECLARE
    t record;
    defs text[];
    d text;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'events'::regclass) <> 'p' THEN
        RETURN;
    END IF;
    FOR t IN SELECT * FROM (VALUES ('events'), ('webhook_deliveries'), ('webhook_attempts')) v (name) LOOP
        SELECT array_agg(CASE WHEN c.oid IS NOT NULL
                THEN format('ALTER TABLE %I ADD CONSTRAINT %I %s', t.name, c.conname, pg_get_constraintdef(c.oid))
                ELSE pg_get_indexdef(i.indexrelid) END) INTO defs
        FROM pg_index i LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
        WHERE i.indrelid = t.name::regclass;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)', t.name || '_plain', t.name);
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', t.name || '_plain', t.name);
        EXECUTE format('DROP TABLE %I CASCADE', t.name);
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t.name || '_plain', t.name);
        FOREACH d IN ARRAY defs LOOP
            EXECUTE d;
        END LOOP;
    END LOOP;
    ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_delivery_id_fkey
        FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries (id) ON DELETE CASCADE;
END
$$;
-- +goose StatementEnd
