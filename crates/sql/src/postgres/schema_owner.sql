-- Sent alone, first on a connection (see guard::Guard::schema): the schema dlock's objects are
-- in, the session's current schema (the first of the search path that exists and that the role
-- may use), or after a reconnect the one found before (`$2`), quoted as an identifier (and as it
-- is), and whether a role dlock trusts owns it. Every statement after it names dlock's tables and
-- functions with this schema, so that nothing another role makes later (a schema named like the
-- user, earlier in the default `"$user", public`, with a view or a function of dlock's name) is
-- ever reached: the schema is decided once, here. Its
-- owner may drop or replace what is in it, so it must be trusted: the current user, a role of
-- the URL's `owner=` (`$1`), the bootstrap superuser (oid 10, owner of `public` before
-- PostgreSQL 15) or `pg_database_owner` (oid 6171, its owner since). No row: no schema of the
-- search path exists.
SELECT pg_catalog.quote_ident(n.nspname),
       pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(n.nspowner)),
       n.nspowner OPERATOR(pg_catalog.=) ANY (ARRAY[10, 6171]::pg_catalog.oid[])
           OR pg_catalog.pg_get_userbyid(n.nspowner) OPERATOR(pg_catalog.=) CURRENT_USER
           OR pg_catalog.pg_get_userbyid(n.nspowner)::pg_catalog.text
              OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]),
       n.nspname::pg_catalog.text
  FROM pg_catalog.pg_namespace n
 WHERE n.nspname OPERATOR(pg_catalog.=) coalesce($2::pg_catalog.text, pg_catalog.current_schema())
