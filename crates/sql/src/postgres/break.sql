SELECT 'h', name, owner, mode, token::pg_catalog.text, extract(epoch FROM since)::bigint::pg_catalog.text, pid::pg_catalog.text,
       host, message, pg_catalog.floor(extract(epoch FROM expires_at) OPERATOR(pg_catalog.*) 1000.0)::bigint::pg_catalog.text
  FROM {s}.{p}break_v3($1)
