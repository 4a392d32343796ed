-- The first attempt of a run, in plain SQL after lock_count.sql: grants when `$1` has no row at
-- all, neither holder nor waiter nor a stale one (a lock nobody uses, the common case); else
-- grants nothing and the next attempt is acquire_v4's, which takes a place in line. Plain SQL,
-- because a run's session is new, and there the first call of a PL/pgSQL function costs more than
-- this whole attempt: the language is loaded, the function compiled, each statement planned.
-- A grant also writes its run as the name's last run (see acquire_v4; `$8`: the record's tail),
-- in the same statement, and answers it.
WITH token AS (
    UPDATE {s}.{p}tokens t SET last_token = t.last_token OPERATOR(pg_catalog.+) 1
     WHERE t.name OPERATOR(pg_catalog.=) $1
       AND NOT EXISTS (SELECT 1 FROM {s}.{p}locks l WHERE l.name OPERATOR(pg_catalog.=) $1)
       AND NOT EXISTS (SELECT 1 FROM {s}.{p}queue q WHERE q.name OPERATOR(pg_catalog.=) $1)
    RETURNING t.last_token
), held AS (
    INSERT INTO {s}.{p}locks (name, owner, mode, token, since, expires_at, pid, host, message)
    SELECT $1, $2, $3, token.last_token, now.t, now.t OPERATOR(pg_catalog.+) ($4 OPERATOR(pg_catalog.*) interval '1 millisecond'), $5, $6, $7
      FROM token, (SELECT pg_catalog.clock_timestamp() AS t) AS now
    RETURNING token, since
), started AS (
    SELECT held.token, held.since,
           'run1 ' OPERATOR(pg_catalog.||) held.token::pg_catalog.text OPERATOR(pg_catalog.||) ' '
               OPERATOR(pg_catalog.||) pg_catalog.floor(extract(epoch FROM held.since)
                                                        OPERATOR(pg_catalog.*) 1000.0)::bigint::pg_catalog.text
               OPERATOR(pg_catalog.||) ' - - ' OPERATOR(pg_catalog.||) $8::pg_catalog.text AS run
      FROM held
), written AS (
    INSERT INTO {s}.{p}runs AS r (name, last_run, written_at)
    SELECT $1, started.run, started.since FROM started
        ON CONFLICT (name) DO UPDATE SET last_run = excluded.last_run,
                                         written_at = excluded.written_at
)
SELECT token, run FROM started
