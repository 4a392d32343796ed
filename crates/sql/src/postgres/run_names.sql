-- The names starting with $1 that have last runs (list --runs), not those unwritten for 400 days,
-- the first {most} by name: one more than `list --runs` shows, so that it can say it stopped.
-- Each name's records are then read as last_runs.sql reads them.
SELECT name
  FROM {s}.{p}runs
 WHERE pg_catalog.starts_with(name, $1)
   AND written_at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) interval '{kept_days} days')
 ORDER BY name
 LIMIT {most}
