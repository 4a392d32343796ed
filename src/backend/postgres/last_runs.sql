-- The last run and the last success of `$1` as stored (any content: other clients may write this
-- table), at most {read} characters of each (`Run::from_record` finds a longer one unreadable), not
-- shown once the name has gone unwritten for 400 days.
SELECT pg_catalog.substr(last_run, 1, {read}), pg_catalog.substr(last_success, 1, {read})
  FROM {s}.{p}runs
 WHERE name OPERATOR(pg_catalog.=) $1
   AND written_at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) interval '{kept_days} days')
