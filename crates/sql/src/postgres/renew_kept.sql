-- renew.sql for a holder with --min-hold: never ends its lease before `kept_until`.
UPDATE {s}.{p}locks
   SET expires_at = greatest(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) ($3 OPERATOR(pg_catalog.*) interval '1 millisecond'), kept_until)
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
   AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
RETURNING token
