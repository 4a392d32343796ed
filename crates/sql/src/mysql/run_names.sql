-- The names starting with a prefix that have last runs (list --runs), not those unwritten for 400
-- days, the first {most} by name: one more than `list --runs` shows, so that it can say it stopped.
-- Each name's records are then read by last_runs_v1.
SELECT name
  FROM {p}runs
 WHERE written_at > UTC_TIMESTAMP(6) - INTERVAL {kept_days} DAY AND {where}
 ORDER BY name
 LIMIT {most}
