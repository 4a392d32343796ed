-- untrusted.sql without the functions and the triggers, for a connection's first transaction
-- when it calls no function of dlock's (a run's first attempt and its release): the tables' owners,
-- and whether any of them has (or had) a trigger, `relhastriggers`, which sends the caller to
-- untrusted.sql (`dlock-triggers`). A new session's first look into pg_proc and pg_trigger costs
-- it about as much as the attempt itself; a table of dlock's has no trigger of its own.
WITH tables AS (
    SELECT c.oid, c.relowner, c.relhastriggers, n.nspname, c.relname
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
     WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
               pg_catalog.to_regclass('{s}.{p}tokens'), pg_catalog.to_regclass('{s}.{p}locks'),
               pg_catalog.to_regclass('{s}.{p}queue'), pg_catalog.to_regclass('{s}.{p}runs'),
               pg_catalog.to_regclass('{s}.{p}groups')]
               ::pg_catalog.oid[])
)
SELECT (CASE WHEN pg_catalog.pg_get_userbyid(t.relowner) OPERATOR(pg_catalog.=) CURRENT_USER
                  OR pg_catalog.pg_get_userbyid(t.relowner)::pg_catalog.text
                     OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])
             THEN 'dlock-triggers: '
             ELSE 'dlock-untrusted: table ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(t.nspname)
                  OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(t.relname)
                  OPERATOR(pg_catalog.||) ' belongs to '
                  OPERATOR(pg_catalog.||) pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(t.relowner))
        END)::pg_catalog.int4
  FROM tables t
 WHERE t.relhastriggers
    OR NOT (pg_catalog.pg_get_userbyid(t.relowner) OPERATOR(pg_catalog.=) CURRENT_USER
            OR pg_catalog.pg_get_userbyid(t.relowner)::pg_catalog.text
               OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]))
 LIMIT 1
