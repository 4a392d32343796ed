SELECT 'h', name, owner, mode, token::text, extract(epoch FROM since)::bigint::text, pid::text,
       host, message, pg_catalog.floor(extract(epoch FROM expires_at) * 1000.0)::bigint::text
  FROM {p}break_v3($1)
