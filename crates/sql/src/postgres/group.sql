-- A lock's concurrency group record (src/lock/group.rs), one statement per use, `$1` the name:
-- `read` answers its first {most} characters (any content: other clients may write this table);
-- the others change it only if it is still what the caller read (`$2`), answering a row when
-- they did, so that no change falls between another's read and write. A change also notifies
-- `$4`, the channel of the group records (recipe/group.rs), with nothing said (a holder that
-- hears it reads its records): in the same statement, only when it changed the row, delivered
-- when its transaction commits. `{most}`, `{s}` and `{p}` are filled in as in the other
-- statements. Split by the client at the lines `-- read`, `-- insert`, `-- update`, `-- delete`.
-- read
SELECT pg_catalog.substr(record, 1, {most})
  FROM {s}.{p}groups
 WHERE name OPERATOR(pg_catalog.=) $1
-- insert
WITH changed AS (
    INSERT INTO {s}.{p}groups (name, record, written_at)
    VALUES ($1, $3, pg_catalog.clock_timestamp())
        ON CONFLICT (name) DO NOTHING
    RETURNING 1
)
SELECT 1, pg_catalog.pg_notify($4, '') FROM changed
-- update
WITH changed AS (
    UPDATE {s}.{p}groups
       SET record = $3, written_at = pg_catalog.clock_timestamp()
     WHERE name OPERATOR(pg_catalog.=) $1 AND record OPERATOR(pg_catalog.=) $2
    RETURNING 1
)
SELECT 1, pg_catalog.pg_notify($4, '') FROM changed
-- delete
WITH changed AS (
    DELETE FROM {s}.{p}groups
     WHERE name OPERATOR(pg_catalog.=) $1 AND record OPERATOR(pg_catalog.=) $2
    RETURNING 1
)
SELECT 1, pg_catalog.pg_notify($4, '') FROM changed
