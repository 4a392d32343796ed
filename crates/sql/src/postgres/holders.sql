-- The live holders ('h') and waiters ('w', in line order) of the names starting with $1 (status:
-- the one name, by $2), as text, so that a row of any content reads: each field is checked in
-- Rust. `expires`: the lease's end by the server's clock, in Unix milliseconds; `kept_until` (in
-- milliseconds) and `kept_note`: what `--min-hold` keeps, read through to_jsonb so that the
-- statement also reads a table made before those columns were added.
SELECT kind, name, owner, mode, token, since, pid, host, message, expires, kept_until, kept_note
  FROM (
    SELECT 'h' AS kind, name, owner, mode, token::pg_catalog.text AS token,
           extract(epoch FROM since)::bigint::pg_catalog.text AS since, pid::pg_catalog.text AS pid, host, message,
           pg_catalog.floor(extract(epoch FROM expires_at) OPERATOR(pg_catalog.*) 1000.0)::bigint::pg_catalog.text AS expires,
           (extract(epoch FROM (pg_catalog.to_jsonb(l) OPERATOR(pg_catalog.->>) 'kept_until')::pg_catalog.timestamptz)
                OPERATOR(pg_catalog.*) 1000.0)::bigint::pg_catalog.text
               AS kept_until,
           pg_catalog.to_jsonb(l) OPERATOR(pg_catalog.->>) 'kept_note' AS kept_note, token AS n
      FROM {s}.{p}locks l
     WHERE expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
       AND CASE WHEN $2 THEN name OPERATOR(pg_catalog.=) $1 ELSE pg_catalog.starts_with(name, $1) END
    UNION ALL
    SELECT 'w', name, owner, mode, NULL, extract(epoch FROM since)::bigint::pg_catalog.text,
           pid::pg_catalog.text,
           host, message, NULL, NULL, NULL, ticket
      FROM {s}.{p}queue
     WHERE alive_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
       AND CASE WHEN $2 THEN name OPERATOR(pg_catalog.=) $1 ELSE pg_catalog.starts_with(name, $1) END
) AS entries
 ORDER BY name, kind, n
