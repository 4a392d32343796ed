-- --min-hold: the caller's live row stays until `since` + $3 ms by the server's clock, also past
-- its release or its death (its lease is pushed out to there at least). `kept_note`: the
-- min-hold in ms, for status.
UPDATE {s}.{p}locks
   SET kept_until = since OPERATOR(pg_catalog.+) ($3 OPERATOR(pg_catalog.*) interval '1 millisecond'), kept_note = $3::pg_catalog.text,
       expires_at = greatest(expires_at, since OPERATOR(pg_catalog.+) ($3 OPERATOR(pg_catalog.*) interval '1 millisecond'))
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
   AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
RETURNING token
