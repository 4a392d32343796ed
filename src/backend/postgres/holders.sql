-- The live holders of the names starting with $1 (status: the one name, by $2), as text, so that a
-- row of any content reads: each field is checked in Rust. The min-hold columns are read through
-- to_jsonb, so that the statement also reads a table made before they were added.
SELECT name, owner, mode, token::text, extract(epoch FROM since)::bigint::text, pid::text, host,
       (extract(epoch FROM (to_jsonb(l) ->> 'kept_until')::timestamptz) * 1000)::bigint::text,
       to_jsonb(l) ->> 'kept_note'
  FROM {p}locks l
 WHERE expires_at > clock_timestamp()
   AND CASE WHEN $2 THEN name = $1 ELSE starts_with(name, $1) END
 ORDER BY name, token
