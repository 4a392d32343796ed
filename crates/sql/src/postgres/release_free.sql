-- A holder's release in plain SQL (see acquire_free.sql) after lock_count.sql, when nobody is in
-- line for `$1` (the common case): its row goes, and there is nobody to wake. With someone in
-- line it removes nothing and says so (`waits`), and release_v3 does it all. `held`: the row was
-- there and its lease still ran. Writes how the run ended as release_v3 does (`$3` the head of
-- the record its grant wrote, `$4` its tail, `$5` the ending, `$6` also the last success), and as
-- it does, a lock no longer held ends the run 'lost', and no success.
WITH line AS (
    SELECT EXISTS (SELECT 1 FROM {s}.{p}queue q WHERE q.name OPERATOR(pg_catalog.=) $1) AS waits
), gone AS (
    DELETE FROM {s}.{p}locks l USING line
     WHERE l.name OPERATOR(pg_catalog.=) $1 AND l.owner OPERATOR(pg_catalog.=) $2 AND NOT line.waits
    RETURNING l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() AS held
), lost AS (
    SELECT NOT coalesce((SELECT held FROM gone), false) AS yes
), ended AS (
    SELECT now.t, $6::boolean AND NOT lost.yes AS success,
           $3::pg_catalog.text OPERATOR(pg_catalog.||) ' - - ' OPERATOR(pg_catalog.||) $4::pg_catalog.text AS started,
           $3::pg_catalog.text OPERATOR(pg_catalog.||) ' '
               OPERATOR(pg_catalog.||) pg_catalog.floor(extract(epoch FROM now.t)
                                                        OPERATOR(pg_catalog.*) 1000.0)::bigint::pg_catalog.text
               OPERATOR(pg_catalog.||) ' '
               OPERATOR(pg_catalog.||) CASE WHEN lost.yes THEN 'lost' ELSE $5::pg_catalog.text END
               OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) $4::pg_catalog.text AS run
      FROM line, lost, (SELECT pg_catalog.clock_timestamp() AS t) AS now
     WHERE NOT line.waits AND $3::pg_catalog.text IS NOT NULL
), written AS (
    UPDATE {s}.{p}runs r
       SET last_run = CASE WHEN r.last_run OPERATOR(pg_catalog.=) ended.started THEN ended.run
                           ELSE r.last_run END,
           last_success = CASE WHEN ended.success THEN ended.run ELSE r.last_success END,
           written_at = ended.t
      FROM ended
     WHERE r.name OPERATOR(pg_catalog.=) $1 AND (r.last_run OPERATOR(pg_catalog.=) ended.started OR ended.success)
), first_success AS (
    INSERT INTO {s}.{p}runs (name, last_success, written_at)
    SELECT $1, ended.run, ended.t FROM ended
     WHERE ended.success AND NOT EXISTS (SELECT 1 FROM {s}.{p}runs r WHERE r.name OPERATOR(pg_catalog.=) $1)
        ON CONFLICT (name) DO NOTHING
)
SELECT line.waits, coalesce((SELECT held FROM gone), false) AS held FROM line
