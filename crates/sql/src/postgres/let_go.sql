-- A holder with --min-hold whose command ended: its row stays until `kept_until` by the server's
-- clock, and no longer. No row: the min-hold is over (or the lock was lost); release it as usual.
-- The run ended all the same: how is written as release_free.sql writes it (`$3` to `$6`).
WITH kept AS (
    UPDATE {s}.{p}locks SET expires_at = kept_until, kept_note = kept_note OPERATOR(pg_catalog.||) ' ended'
     WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
       AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
       AND kept_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    RETURNING token
), ended AS (
    SELECT now.t,
           $3::pg_catalog.text OPERATOR(pg_catalog.||) ' - - ' OPERATOR(pg_catalog.||) $4::pg_catalog.text AS started,
           $3::pg_catalog.text OPERATOR(pg_catalog.||) ' '
               OPERATOR(pg_catalog.||) pg_catalog.floor(extract(epoch FROM now.t)
                                                        OPERATOR(pg_catalog.*) 1000.0)::bigint::pg_catalog.text
               OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) $5::pg_catalog.text
               OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) $4::pg_catalog.text AS run
      FROM (SELECT pg_catalog.clock_timestamp() AS t) AS now
     WHERE $3::pg_catalog.text IS NOT NULL AND EXISTS (SELECT 1 FROM kept)
), written AS (
    UPDATE {s}.{p}runs r
       SET last_run = CASE WHEN r.last_run OPERATOR(pg_catalog.=) ended.started THEN ended.run
                           ELSE r.last_run END,
           last_success = CASE WHEN $6::boolean THEN ended.run ELSE r.last_success END,
           written_at = ended.t
      FROM ended
     WHERE r.name OPERATOR(pg_catalog.=) $1 AND (r.last_run OPERATOR(pg_catalog.=) ended.started OR $6::boolean)
)
SELECT token FROM kept
