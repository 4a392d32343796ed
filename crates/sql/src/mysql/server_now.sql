-- The server's time in milliseconds since the epoch, the clock that dates the run records (as the
-- procedures write ACQUIRED_MS and ENDED_MS): a record dated later is unreadable.
SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000 AS UNSIGNED)
