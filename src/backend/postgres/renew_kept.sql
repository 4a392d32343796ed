-- renew.sql for a holder with --min-hold: never ends its lease before `kept_until`.
UPDATE {p}locks
   SET expires_at = greatest(clock_timestamp() + $3 * interval '1 millisecond', kept_until)
 WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING token
