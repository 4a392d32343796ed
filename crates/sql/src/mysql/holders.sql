-- The live holders of one name (status) or of the names starting with a prefix (list), each field
-- as the row has it: each is checked in Rust. Times are seconds (since) and microseconds
-- (expires_at, kept_until) from the epoch, counted on the UTC DATETIMEs without the session's
-- time zone; `kept_until` and `kept_note`: what --min-hold keeps (NULL without one).
SELECT name, owner, mode, CAST(token AS CHAR), TIMESTAMPDIFF(SECOND, '1970-01-01', since),
       CAST(pid AS CHAR), host, message, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at),
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01', kept_until), kept_note
  FROM {p}locks
 WHERE expires_at > UTC_TIMESTAMP(6) AND {where}
 ORDER BY name, token
