-- The live holders ('h') and waiters ('w', in line order) of the names starting with $1 (status:
-- the one name, by $2), as text, so that a row of any content reads: each field is checked in
-- Rust. `expires`: the lease's end by the server's clock, in Unix milliseconds.
SELECT kind, name, owner, mode, token, since, pid, host, message, expires FROM (
    SELECT 'h' AS kind, name, owner, mode, token::text AS token,
           extract(epoch FROM since)::bigint::text AS since, pid::text AS pid, host, message,
           floor(extract(epoch FROM expires_at) * 1000)::bigint::text AS expires, token AS n
      FROM {p}locks
     WHERE expires_at > clock_timestamp()
       AND CASE WHEN $2 THEN name = $1 ELSE starts_with(name, $1) END
    UNION ALL
    SELECT 'w', name, owner, mode, NULL, extract(epoch FROM since)::bigint::text, pid::text,
           host, message, NULL, ticket
      FROM {p}queue
     WHERE alive_until > clock_timestamp()
       AND CASE WHEN $2 THEN name = $1 ELSE starts_with(name, $1) END
) AS entries
 ORDER BY name, kind, n
