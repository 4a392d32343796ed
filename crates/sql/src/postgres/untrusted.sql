-- First in a connection's first transaction (see guard::Guard): fails that transaction, before
-- any statement touches dlock's tables, when a table or function of dlock's name, or a trigger on
-- one of its tables, belongs to a role dlock does not trust. Trusted: the current user and the
-- roles named in the URL (`owner=`, `$1`); nobody else, not even a superuser or a role the
-- current user is a member of (pg_has_role() says a superuser is a member of every role). Names
-- of roles by pg_get_userbyid(), not through pg_roles: the view costs a new session's first
-- query about a millisecond more to plan. The names are those of the schema dlock uses
-- (`{s}`, see schema_owner.sql), as the statements that follow name them. Plain SQL (a new session's first
-- PL/pgSQL call costs more than a whole attempt), every name qualified; it fails by casting its
-- finding to an integer, which the client reads back from the error (`dlock-untrusted: ...`).
WITH tables AS (
    -- Each name looked up once (unnest), then its row by its oid: a filter on pg_class would
    -- call the lookups again for each of its rows.
    SELECT c.oid, c.relowner, n.nspname, c.relname
      FROM pg_catalog.unnest(ARRAY[
               pg_catalog.to_regclass('{s}.{p}tokens'), pg_catalog.to_regclass('{s}.{p}locks'),
               pg_catalog.to_regclass('{s}.{p}queue'), pg_catalog.to_regclass('{s}.{p}runs'),
               pg_catalog.to_regclass('{s}.{p}groups')]
               ::pg_catalog.oid[]) AS named (oid)
      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) named.oid
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
), owned AS (
    SELECT 'table ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(t.nspname)
               OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(t.relname)
               AS what,
           t.relowner AS owner
      FROM tables t
    UNION ALL
    SELECT 'function ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(n.nspname)
               OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(p.proname),
           p.proowner
      FROM pg_catalog.pg_proc p
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
     WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace('{s}')
       AND p.proname OPERATOR(pg_catalog.=) ANY (ARRAY[{functions}]::pg_catalog.name[])
    UNION ALL
    SELECT 'trigger ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(g.tgname)
               OPERATOR(pg_catalog.||) ' on ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(t.nspname)
               OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(t.relname),
           p.proowner
      FROM pg_catalog.pg_trigger g
      JOIN tables t ON t.oid OPERATOR(pg_catalog.=) g.tgrelid
      JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) g.tgfoid
     WHERE NOT g.tgisinternal
)
SELECT ('dlock-untrusted: ' OPERATOR(pg_catalog.||) o.what OPERATOR(pg_catalog.||) ' belongs to '
        OPERATOR(pg_catalog.||) pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(o.owner)))
       ::pg_catalog.int4
  FROM owned o
 WHERE NOT (pg_catalog.pg_get_userbyid(o.owner) OPERATOR(pg_catalog.=) CURRENT_USER
            OR pg_catalog.pg_get_userbyid(o.owner)::pg_catalog.text
               OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]))
 LIMIT 1
