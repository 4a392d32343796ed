-- Extends the caller's own lease, by the server's clock; an expired lease is never revived.
UPDATE {p}locks SET expires_at = pg_catalog.clock_timestamp() + ($3 OPERATOR(pg_catalog.*) interval '1 millisecond')
 WHERE name = $1 AND owner = $2 AND expires_at > pg_catalog.clock_timestamp()
RETURNING token
