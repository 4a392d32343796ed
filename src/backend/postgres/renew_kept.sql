-- renew.sql for a holder with --min-hold: never ends its lease before `kept_until`.
UPDATE {p}locks
   SET expires_at = greatest(pg_catalog.clock_timestamp() + ($3 OPERATOR(pg_catalog.*) interval '1 millisecond'), kept_until)
 WHERE name = $1 AND owner = $2 AND expires_at > pg_catalog.clock_timestamp()
RETURNING token
