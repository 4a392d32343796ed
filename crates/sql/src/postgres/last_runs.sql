-- The last run and the last success of `$1` as stored (any content: other clients may write this
-- table), at most {read} characters of each (`Run::from_record` finds a longer one unreadable), not
-- shown once the name has gone unwritten for 400 days; and the server's time in milliseconds, by
-- which the records were dated (a record dated later is unreadable).
SELECT pg_catalog.substr(last_run, 1, {read}), pg_catalog.substr(last_success, 1, {read}),
       pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000.0)::pg_catalog.int8::pg_catalog.text
  FROM {s}.{p}runs
 WHERE name OPERATOR(pg_catalog.=) $1
   AND written_at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) interval '{kept_days} days')
