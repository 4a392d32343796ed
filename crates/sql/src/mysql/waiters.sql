-- The live waiters of one name (status) or of the names starting with a prefix (list), in line
-- order, in the columns of holders.sql (no token, lease or min-hold): each field is checked in
-- Rust. A row an older dlock wrote has no since, pid, host or message: a waiter of that mode, the
-- rest unknown.
SELECT name, owner, mode, NULL, TIMESTAMPDIFF(SECOND, '1970-01-01', since), CAST(pid AS CHAR),
       host, message, NULL, NULL, NULL
  FROM {p}queue
 WHERE alive_until > UTC_TIMESTAMP(6) AND {where}
 ORDER BY name, ticket
