-- Deletes up to 1000 rows of `{s}.{p}runs` of names unwritten for 400 days (which no read shows),
-- skipping any row another transaction holds: it waits for nobody. Sent by `list`, before its
-- listing: rarely, and it reads the whole table (a run pays for no index on `written_at`).
DELETE FROM {s}.{p}runs r
 WHERE r.name OPERATOR(pg_catalog.=) ANY (SELECT o.name FROM {s}.{p}runs o
                   WHERE o.written_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp()
                                         OPERATOR(pg_catalog.-) interval '{kept_days} days')
                   LIMIT 1000 FOR UPDATE OF o SKIP LOCKED)
