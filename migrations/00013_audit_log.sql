-- +goose Up
-- The audit log (docs/audit.md): one row per state-changing request of a
-- member or an API key, written in the transaction of the action itself.
-- Rows are never updated or deleted (the triggers below refuse it); a month
-- of them is dropped as a whole once it is older than a year
-- (audit_drop_before), after the last dropped entry of each chain is kept
-- as its anchor.
--
-- Each merchant's entries form audit.Chains chains; in each, seq counts
-- from 1 without gaps and prev_hash is the hash of the entry before (32 zero
-- bytes for the first), hash = SHA-256(prev_hash || the entry's canonical
-- encoding, see internal/audit Entry.Encode).
CREATE TABLE audit_log (
    id          text        NOT NULL,
    merchant_id text        NOT NULL,
    chain       int         NOT NULL,
    seq         bigint      NOT NULL,
    at          timestamptz NOT NULL,
    actor_type  text        NOT NULL,
    actor_id    text        NOT NULL,
    action      text        NOT NULL,
    object_type text        NOT NULL,
    object_id   text        NOT NULL,
    ip          text        NOT NULL,
    user_agent  text        NOT NULL,
    request_id  text        NOT NULL,
    prev_hash   bytea       NOT NULL,
    hash        bytea       NOT NULL,
    PRIMARY KEY (merchant_id, chain, seq, at)
) PARTITION BY RANGE (at);
-- Lists page on the id; an object's history is found by its id.
CREATE INDEX audit_log_merchant_id ON audit_log (merchant_id, id);
CREATE INDEX audit_log_object ON audit_log (merchant_id, object_id) WHERE object_id <> '';
-- A safety net for entries outside every monthly partition (the worker
-- creates them three months ahead): it should stay empty.
CREATE TABLE audit_log_default PARTITION OF audit_log DEFAULT;

-- The last entry of each chain: appending locks its row until the action's
-- transaction commits, which orders the chain, and reads the previous hash
-- from it. It is the writer's cursor, not the record: verify checks it
-- against the entries (an entry removed from a chain's end shows).
CREATE TABLE audit_heads (
    merchant_id text        NOT NULL,
    chain       int         NOT NULL,
    seq         bigint      NOT NULL,
    hash        bytea       NOT NULL,
    at          timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, chain)
) WITH (fillfactor = 50);

-- The last entry of each chain in each month dropped by retention: a
-- chain's check starts after its latest anchor.
CREATE TABLE audit_anchors (
    merchant_id text        NOT NULL,
    chain       int         NOT NULL,
    seq         bigint      NOT NULL,
    hash        bytea       NOT NULL,
    at          timestamptz NOT NULL,
    dropped_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, chain, seq)
);

-- +goose StatementBegin
CREATE FUNCTION audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END
$$;
-- +goose StatementEnd
-- Row triggers are cloned to every partition; statement triggers refuse a
-- statement on the table even when it matches no row.
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_log_append_only_statement BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log_default
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_anchors_append_only BEFORE UPDATE OR DELETE ON audit_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();
CREATE TRIGGER audit_anchors_no_truncate BEFORE TRUNCATE ON audit_anchors
    FOR EACH STATEMENT EXECUTE FUNCTION audit_refuse();

-- The canonical encoding's fields: a 4-byte big-endian length, then the
-- bytes (text as UTF-8, integers as 8-byte big-endian).
CREATE FUNCTION audit_text(t text) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN int4send(octet_length(convert_to(t, 'UTF8'))) || convert_to(t, 'UTF8');
CREATE FUNCTION audit_int(v bigint) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN int4send(8) || int8send(v);

-- +goose StatementBegin
-- audit_append appends an entry to the merchant's chain and returns its
-- seq. The chain's head stays locked until the caller's transaction ends,
-- so callers run it as the last statement before commit.
CREATE FUNCTION audit_append(p_id text, p_merchant text, p_chain int, p_actor_type text, p_actor_id text,
    p_action text, p_object_type text, p_object_id text, p_ip text, p_user_agent text, p_request_id text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    h audit_heads%ROWTYPE;
    v_seq bigint;
    v_at timestamptz;
    v_hash bytea;
BEGIN
    SELECT * INTO h FROM audit_heads WHERE merchant_id = p_merchant AND chain = p_chain FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO audit_heads (merchant_id, chain, seq, hash, at)
        VALUES (p_merchant, p_chain, 0, decode(repeat('00', 32), 'hex'), '-infinity')
        ON CONFLICT DO NOTHING;
        SELECT * INTO h FROM audit_heads WHERE merchant_id = p_merchant AND chain = p_chain FOR UPDATE;
    END IF;
    v_seq := h.seq + 1;
    -- Never before the previous entry, whatever the clock does.
    v_at := greatest(date_trunc('microseconds', clock_timestamp()), h.at);
    v_hash := sha256(h.hash || audit_text('gatehouse.audit.v1') || audit_text(p_id) || audit_text(p_merchant)
        || audit_int(p_chain) || audit_int(v_seq) || audit_int((extract(epoch FROM v_at) * 1000000)::bigint)
        || audit_text(p_actor_type) || audit_text(p_actor_id) || audit_text(p_action) || audit_text(p_object_type)
        || audit_text(p_object_id) || audit_text(p_ip) || audit_text(p_user_agent) || audit_text(p_request_id));
    INSERT INTO audit_log (id, merchant_id, chain, seq, at, actor_type, actor_id, action, object_type, object_id,
        ip, user_agent, request_id, prev_hash, hash)
    VALUES (p_id, p_merchant, p_chain, v_seq, v_at, p_actor_type, p_actor_id, p_action, p_object_type, p_object_id,
        p_ip, p_user_agent, p_request_id, h.hash, v_hash);
    UPDATE audit_heads SET seq = v_seq, hash = v_hash, at = v_at WHERE merchant_id = p_merchant AND chain = p_chain;
    RETURN v_seq;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- audit_ensure_partitions creates the monthly partitions (UTC months) from
-- the month of p_from to p_months after it that do not exist yet, and
-- returns how many it created.
CREATE FUNCTION audit_ensure_partitions(p_from timestamptz, p_months int) RETURNS int LANGUAGE plpgsql AS $$
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

-- +goose StatementBegin
-- audit_drop_before drops the monthly partitions that end at or before
-- p_cutoff, oldest first, each after writing the anchor of every chain
-- with entries in it (its last entry there), and returns how many it
-- dropped.
CREATE FUNCTION audit_drop_before(p_cutoff timestamptz) RETURNS int LANGUAGE plpgsql AS $$
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

SELECT audit_ensure_partitions(now(), 3);

-- +goose Down
DROP FUNCTION audit_drop_before(timestamptz);
DROP FUNCTION audit_ensure_partitions(timestamptz, int);
DROP FUNCTION audit_append(text, text, int, text, text, text, text, text, text, text, text);
DROP FUNCTION audit_int(bigint);
DROP FUNCTION audit_text(text);
DROP TABLE audit_log;
DROP TABLE audit_anchors;
DROP TABLE audit_heads;
DROP FUNCTION audit_refuse();
