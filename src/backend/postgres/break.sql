SELECT name, owner, mode, token::text, extract(epoch FROM since)::bigint::text, pid::text, host
  FROM {p}break_v1($1)
