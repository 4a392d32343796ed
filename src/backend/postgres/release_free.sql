-- A holder's release in plain SQL (see acquire_free.sql) after lock_count.sql, when nobody is in
-- line for `$1` (the common case): its row goes, and there is nobody to wake. With someone in
-- line it removes nothing and says so (`waits`), and release_v2 does it all. `held`: the row was
-- there and its lease still ran.
WITH line AS (
    SELECT EXISTS (SELECT 1 FROM {p}queue q WHERE q.name = $1) AS waits
), gone AS (
    DELETE FROM {p}locks l USING line
     WHERE l.name = $1 AND l.owner = $2 AND NOT line.waits
    RETURNING l.expires_at > pg_catalog.clock_timestamp() AS held
)
SELECT line.waits, coalesce((SELECT held FROM gone), false) AS held FROM line
