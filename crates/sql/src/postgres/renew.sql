-- Extends the caller's own lease, by the server's clock; an expired lease is never revived.
UPDATE {s}.{p}locks SET expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ($3 OPERATOR(pg_catalog.*) interval '1 millisecond')
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
   AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
RETURNING token
