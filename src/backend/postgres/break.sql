SELECT 'h', name, owner, mode, token::text, extract(epoch FROM since)::bigint::text, pid::text,
       host, message, floor(extract(epoch FROM expires_at) * 1000)::bigint::text
  FROM {p}break_v1($1)
