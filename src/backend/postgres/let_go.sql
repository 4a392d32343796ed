-- A holder with --min-hold whose command ended: its row stays until `kept_until` by the server's
-- clock, and no longer. No row: the min-hold is over (or the lock was lost); release it as usual.
UPDATE {p}locks SET expires_at = kept_until, kept_note = kept_note || ' ended'
 WHERE name = $1 AND owner = $2 AND expires_at > pg_catalog.clock_timestamp()
   AND kept_until > pg_catalog.clock_timestamp()
RETURNING token
