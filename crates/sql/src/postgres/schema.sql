-- dlock's tables and functions, created on first use. `{p}` is the table prefix (default `dlock_`),
-- `{s}` the schema they are made in (the session's current schema, quoted). Run in one transaction
-- under an advisory lock, so that two dlocks creating them at once do not collide. The functions
-- are versioned by name (`_v1`): a newer dlock adds its own beside them. Each pins its search path
-- to the system catalog and names everything of dlock's with its schema: a caller's search path
-- (which may list a schema others can create in, `public` before PostgreSQL 15) never decides
-- which function or operator runs inside (the CVE-2018-1058 class). v2 of each (v3 of acquire):
-- the first with the pinned path; v4 of acquire, v3 of release and break: the first that write
-- the last runs.

-- The fencing counter of each name: the last token handed out. Updated in the transaction that
-- grants, so it is as durable as the grant; never a sequence, which may go back after a failover.
CREATE TABLE IF NOT EXISTS {s}.{p}tokens (
    name text PRIMARY KEY,
    last_token bigint NOT NULL
);

-- The holders: one row per (name, owner). `expires_at` is the lease, by the server's clock.
CREATE TABLE IF NOT EXISTS {s}.{p}locks (
    name text NOT NULL,
    owner text NOT NULL,
    mode text NOT NULL,
    token bigint NOT NULL,
    since timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    pid bigint NOT NULL,
    host text NOT NULL,
    PRIMARY KEY (name, owner)
);

-- The waiters in arrival order; a waiter renews `alive_until` while it waits, and one that stops
-- doing so drops out of the line.
CREATE TABLE IF NOT EXISTS {s}.{p}queue (
    ticket bigserial PRIMARY KEY,
    name text NOT NULL,
    owner text NOT NULL,
    mode text NOT NULL,
    alive_until timestamptz NOT NULL
);

-- The last run and the last success of each name (src/lock/last_run.rs), each in its one text
-- form (`Run::record`), its times and token written by the server: the last run by the
-- transaction that grants, its ending by the one that releases (only while the record is still
-- that run's, unchanged: the client hands back the record it was answered with). `written_at`:
-- the last write, by the server's clock; a name unwritten for 400 days is not shown, and its row
-- is deleted by a later `list` (expire_runs.sql). No index on it: every run writes the row, and
-- would pay for one. A table of its own, added beside an older dlock's three: an older dlock
-- neither reads nor writes it.
CREATE TABLE IF NOT EXISTS {s}.{p}runs (
    name text PRIMARY KEY,
    last_run text,
    last_success text,
    written_at timestamptz NOT NULL
);

-- The concurrency group record of each name (src/lock/group.rs: `run --supersede` and
-- `--cancel-in-progress`), changed by compare-and-set (group.sql). A table of its own, which an
-- older dlock neither reads nor writes; made by the first call of a dlock that finds it missing.
CREATE TABLE IF NOT EXISTS {s}.{p}groups (
    name text PRIMARY KEY,
    record text NOT NULL,
    written_at timestamptz NOT NULL
);

-- Added after the first release (tables made by an older dlock gain them here): the holder's
-- `--message`, and who waits, for `status` and `list`; for --min-hold, until when the row stays
-- past its holder's release or death, by the server's clock, and "HOLD_MS[ ended]" for status.
-- Null in rows an older dlock wrote. Each only when missing, as the index: ALTER TABLE and CREATE
-- INDEX lock the table even when the column or the index is there, and would deadlock with the
-- dlocks using the tables meanwhile (this runs again whenever a dlock finds a function missing).
DO $$
BEGIN
    IF to_regclass('{s}.{p}queue_by_name') IS NULL THEN
        CREATE INDEX IF NOT EXISTS {p}queue_by_name ON {s}.{p}queue (name, ticket);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = '{s}.{p}locks'::pg_catalog.regclass AND attname = 'kept_until'
                      AND NOT attisdropped) THEN
        ALTER TABLE {s}.{p}locks ADD COLUMN IF NOT EXISTS kept_until timestamptz,
            ADD COLUMN IF NOT EXISTS kept_note text;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = '{s}.{p}locks'::pg_catalog.regclass AND attname = 'message'
                      AND NOT attisdropped) THEN
        ALTER TABLE {s}.{p}locks ADD COLUMN IF NOT EXISTS message text;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = '{s}.{p}queue'::pg_catalog.regclass AND attname = 'message'
                      AND NOT attisdropped) THEN
        ALTER TABLE {s}.{p}queue ADD COLUMN IF NOT EXISTS since timestamptz,
            ADD COLUMN IF NOT EXISTS pid bigint,
            ADD COLUMN IF NOT EXISTS host text,
            ADD COLUMN IF NOT EXISTS message text;
    END IF;
END
$$;

-- How a stored mode counts: 'shared', 'limit' or (anything else, a foreign or garbled row)
-- 'exclusive', so a row dlock cannot read makes others wait and never lets two holders in.
CREATE OR REPLACE FUNCTION {s}.{p}kind_v2(mode text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN mode = 'shared' THEN 'shared'
        WHEN mode ~ '^limit:[1-9][0-9]{0,9}$' THEN 'limit'
        ELSE 'exclusive'
    END
$$;

-- One acquisition attempt on `p_name`, serialised with every other change of that name by the
-- row lock on its counter. Grants when the mode fits beside the live holders AND beside every live
-- waiter ahead of this one (counted as if it held already): first come, first served, while
-- shared and limit waiters in a row still go in together. Busy: with `p_queue`, keeps (or takes)
-- a place in line, renewed for `p_ttl_ms`, and says after how long the first lease would run out.
-- v2: a live row of `p_owner` is this acquisition's own, granted to an earlier attempt whose
-- caller stopped waiting for the answer (it timed out, the transaction still committed): it is
-- taken as granted, with its token and a fresh lease, never inserted twice nor waited behind.
-- v4: a grant also writes its run as the name's last run, `run1 TOKEN ACQUIRED_MS - - ` and
-- `p_tail` (`PID OWNER HOST[\tMESSAGE]`, the client's), and answers it (`run`); a grant found
-- already made answers the record that grant wrote, made again from its row.
CREATE OR REPLACE FUNCTION {s}.{p}acquire_v4(
    p_name text, p_owner text, p_mode text, p_limit integer, p_ttl_ms bigint, p_pid bigint,
    p_host text, p_queue boolean, p_ticket bigint, p_message text, p_tail text
) RETURNS TABLE (granted_token bigint, queue_ticket bigint, retry_ms bigint, run text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz;
    v_since timestamptz;
    v_run text;
    v_last bigint;
    v_kind text := {s}.{p}kind_v2(p_mode);
    v_excl bigint;
    v_seats bigint;
    v_total bigint;
    v_fits boolean;
    v_ticket bigint;
    v_own bigint;
BEGIN
    INSERT INTO {s}.{p}tokens (name, last_token) VALUES (p_name, 0) ON CONFLICT (name) DO NOTHING;
    SELECT t.last_token INTO v_last FROM {s}.{p}tokens t WHERE t.name = p_name FOR UPDATE;
    v_now := clock_timestamp();
    DELETE FROM {s}.{p}locks l WHERE l.name = p_name AND l.expires_at <= v_now;
    DELETE FROM {s}.{p}queue q WHERE q.name = p_name AND q.alive_until <= v_now;
    UPDATE {s}.{p}locks l SET expires_at = v_now + p_ttl_ms * interval '1 millisecond'
     WHERE l.name = p_name AND l.owner = p_owner
    RETURNING l.token, l.since INTO v_own, v_since;
    IF v_own IS NOT NULL THEN
        DELETE FROM {s}.{p}queue q WHERE q.name = p_name AND q.owner = p_owner;
        RETURN QUERY SELECT v_own, NULL::bigint, NULL::bigint,
            'run1 ' || v_own || ' ' || floor(extract(epoch FROM v_since) * 1000.0)::bigint
                || ' - - ' || p_tail;
        RETURN;
    END IF;
    IF p_ticket IS NOT NULL THEN
        SELECT q.ticket INTO v_ticket FROM {s}.{p}queue q WHERE q.ticket = p_ticket AND q.owner = p_owner;
    END IF;
    SELECT count(*) FILTER (WHERE k = 'exclusive'), count(*) FILTER (WHERE k = 'limit'), count(*)
      INTO v_excl, v_seats, v_total
      FROM (SELECT {s}.{p}kind_v2(l.mode) AS k FROM {s}.{p}locks l WHERE l.name = p_name
            UNION ALL
            SELECT {s}.{p}kind_v2(q.mode) FROM {s}.{p}queue q
             WHERE q.name = p_name AND (v_ticket IS NULL OR q.ticket < v_ticket)) AS ahead;
    v_fits := CASE v_kind
        WHEN 'exclusive' THEN v_total = 0
        WHEN 'shared' THEN v_excl = 0
        ELSE v_excl = 0 AND v_seats < p_limit
    END;
    IF v_fits THEN
        UPDATE {s}.{p}tokens t SET last_token = v_last + 1 WHERE t.name = p_name;
        INSERT INTO {s}.{p}locks (name, owner, mode, token, since, expires_at, pid, host, message)
        VALUES (p_name, p_owner, p_mode, v_last + 1, v_now,
                v_now + p_ttl_ms * interval '1 millisecond', p_pid, p_host, p_message);
        IF v_ticket IS NOT NULL THEN
            DELETE FROM {s}.{p}queue q WHERE q.ticket = v_ticket;
        END IF;
        v_run := 'run1 ' || (v_last + 1) || ' ' || floor(extract(epoch FROM v_now) * 1000.0)::bigint
            || ' - - ' || p_tail;
        INSERT INTO {s}.{p}runs AS r (name, last_run, written_at) VALUES (p_name, v_run, v_now)
            ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run,
                                             written_at = excluded.written_at;
        RETURN QUERY SELECT v_last + 1, NULL::bigint, NULL::bigint, v_run;
        RETURN;
    END IF;
    IF p_queue THEN
        IF v_ticket IS NULL THEN
            INSERT INTO {s}.{p}queue (name, owner, mode, alive_until, since, pid, host, message)
            VALUES (p_name, p_owner, p_mode, v_now + p_ttl_ms * interval '1 millisecond',
                    v_now, p_pid, p_host, p_message)
            RETURNING ticket INTO v_ticket;
        ELSE
            UPDATE {s}.{p}queue q SET alive_until = v_now + p_ttl_ms * interval '1 millisecond'
             WHERE q.ticket = v_ticket;
        END IF;
    END IF;
    RETURN QUERY SELECT NULL::bigint, v_ticket,
        (SELECT greatest(0, ceil(extract(epoch FROM min(l.expires_at) - v_now) * 1000))::bigint
           FROM {s}.{p}locks l WHERE l.name = p_name), NULL::text;
END
$$;

-- An attempt (acquire_v4) that, when granted and `p_group_most` is not null, also answers the
-- first `p_group_most` characters of the name's concurrency group record (`group_record`; null
-- for none): the supervisor reads it after a grant that waited, and reading it here, in a
-- statement of the function's own once the grant is made (so it sees what was committed before
-- the lock came free), costs the server no transaction more.
CREATE OR REPLACE FUNCTION {s}.{p}acquire_v5(
    p_name text, p_owner text, p_mode text, p_limit integer, p_ttl_ms bigint, p_pid bigint,
    p_host text, p_queue boolean, p_ticket bigint, p_message text, p_tail text,
    p_group_most integer
) RETURNS TABLE (granted_token bigint, queue_ticket bigint, retry_ms bigint, run text,
                 group_record text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v record;
BEGIN
    SELECT * INTO v FROM {s}.{p}acquire_v4(p_name, p_owner, p_mode, p_limit, p_ttl_ms, p_pid,
                                          p_host, p_queue, p_ticket, p_message, p_tail) a;
    RETURN QUERY SELECT v.granted_token, v.queue_ticket, v.retry_ms, v.run,
        CASE WHEN v.granted_token IS NOT NULL AND p_group_most IS NOT NULL THEN
            (SELECT substr(g.record, 1, p_group_most) FROM {s}.{p}groups g
              WHERE g.name = p_name)
        END;
END
$$;

-- Tells the waiters at the head of `p_name`'s line that now fit (on the channel `{p}` || owner),
-- and no others: a handoff wakes only those it lets in, whatever the length of the line. The
-- caller holds the counter's row lock.
CREATE OR REPLACE FUNCTION {s}.{p}wake_v2(p_name text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_excl bigint;
    v_seats bigint;
    v_total bigint;
    w record;
    v_kind text;
    v_limit bigint;
BEGIN
    SELECT count(*) FILTER (WHERE {s}.{p}kind_v2(l.mode) = 'exclusive'),
           count(*) FILTER (WHERE {s}.{p}kind_v2(l.mode) = 'limit'), count(*)
      INTO v_excl, v_seats, v_total
      FROM {s}.{p}locks l WHERE l.name = p_name AND l.expires_at > v_now;
    FOR w IN SELECT q.owner, q.mode FROM {s}.{p}queue q
              WHERE q.name = p_name AND q.alive_until > v_now ORDER BY q.ticket LOOP
        v_kind := {s}.{p}kind_v2(w.mode);
        IF v_kind = 'exclusive' THEN
            EXIT WHEN v_total > 0;
            v_excl := v_excl + 1;
        ELSIF v_kind = 'shared' THEN
            EXIT WHEN v_excl > 0;
        ELSE
            v_limit := substr(w.mode, 7)::bigint;
            EXIT WHEN v_excl > 0 OR v_seats >= v_limit;
            v_seats := v_seats + 1;
        END IF;
        v_total := v_total + 1;
        PERFORM pg_notify('{p}' || w.owner, p_name);
    END LOOP;
END
$$;

-- Gives up `p_owner`'s hold on `p_name` and wakes who may come next. True when it was still held.
-- v3: writes how the run ended (`p_ending`, by the server's clock) into the last run when that is
-- still this run's record, unchanged since its grant wrote it (`p_head || ' - - ' || p_tail`:
-- owner ids are never reused, so no later run's record and no ending is overwritten); and,
-- `p_success`, as the last success whatever the last run is. A lock no longer held (its lease
-- passed, or it was broken) ends the run 'lost' whatever the caller says, and is no success: the
-- command did not hold the lock to its end. No record (`p_head` null): nothing written.
CREATE OR REPLACE FUNCTION {s}.{p}release_v3(
    p_name text, p_owner text, p_head text, p_tail text, p_ending text, p_success boolean
) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_held boolean;
    v_now timestamptz;
    v_ended text;
BEGIN
    PERFORM 1 FROM {s}.{p}tokens t WHERE t.name = p_name FOR UPDATE;
    DELETE FROM {s}.{p}locks l WHERE l.name = p_name AND l.owner = p_owner
    RETURNING l.expires_at > clock_timestamp() INTO v_held;
    IF NOT coalesce(v_held, false) THEN
        p_ending := 'lost';
        p_success := false;
    END IF;
    IF p_head IS NOT NULL THEN
        v_now := clock_timestamp();
        v_ended := p_head || ' ' || floor(extract(epoch FROM v_now) * 1000.0)::bigint || ' '
            || p_ending || ' ' || p_tail;
        UPDATE {s}.{p}runs r
           SET last_run = CASE WHEN r.last_run = p_head || ' - - ' || p_tail THEN v_ended
                               ELSE r.last_run END,
               last_success = CASE WHEN p_success THEN v_ended ELSE r.last_success END,
               written_at = v_now
         WHERE r.name = p_name AND (r.last_run = p_head || ' - - ' || p_tail OR p_success);
        IF p_success AND NOT FOUND THEN
            INSERT INTO {s}.{p}runs (name, last_success, written_at) VALUES (p_name, v_ended, v_now)
                ON CONFLICT (name) DO NOTHING;
        END IF;
    END IF;
    PERFORM {s}.{p}wake_v2(p_name);
    RETURN coalesce(v_held, false);
END
$$;

-- Leaves `p_name`'s line (a waiter that gave up), waking who may come next in its place.
CREATE OR REPLACE FUNCTION {s}.{p}leave_v2(p_name text, p_ticket bigint) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM {s}.{p}tokens t WHERE t.name = p_name FOR UPDATE;
    DELETE FROM {s}.{p}queue q WHERE q.ticket = p_ticket;
    PERFORM {s}.{p}wake_v2(p_name);
END
$$;

-- Breaks `p_name` for every holder (`release --force`); returns the rows removed. v3: a removed
-- holder whose lease still ran and whose run is the last run, not ended, has that run ended
-- `forced` now, by the server's clock (its own release then finds the record changed, and leaves
-- it so). The record is read as text of any content: only one of dlock's form is changed.
CREATE OR REPLACE FUNCTION {s}.{p}break_v3(p_name text) RETURNS SETOF {s}.{p}locks
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM 1 FROM {s}.{p}tokens t WHERE t.name = p_name FOR UPDATE;
    v_now := clock_timestamp();
    RETURN QUERY
    WITH gone AS (
        DELETE FROM {s}.{p}locks l WHERE l.name = p_name RETURNING l.*
    ), forced AS (
        UPDATE {s}.{p}runs r
           SET last_run = regexp_replace(r.last_run, '^(run1 [0-9]+ [0-9]+) - - ',
                   E'\\1 ' || floor(extract(epoch FROM v_now) * 1000.0)::bigint || ' forced '),
               written_at = v_now
         WHERE r.name = p_name AND r.last_run ~ '^run1 [0-9]+ [0-9]+ - - '
           AND split_part(r.last_run, ' ', 7) IN (SELECT g.owner FROM gone g
                                                   WHERE g.expires_at > v_now)
    )
    SELECT * FROM gone;
    PERFORM {s}.{p}wake_v2(p_name);
END
$$;
