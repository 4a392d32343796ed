-- A lock's concurrency group record (src/lock/group.rs), one statement per use, the first `?` the
-- name: `read` answers its first {most} bytes (any bytes: other clients may write this table);
-- the others change it only if it is still what the caller read (the second `?`), and report one
-- row changed when they did, so that no change falls between another's read and write. Split by
-- the client at the lines `-- read`, `-- insert`, `-- update`, `-- delete`.
-- read
SELECT SUBSTRING(record, 1, {most}) FROM {p}groups WHERE name = ?
-- insert
INSERT IGNORE INTO {p}groups (name, record, written_at) VALUES (?, ?, UTC_TIMESTAMP(6))
-- update
UPDATE {p}groups SET record = ?, written_at = UTC_TIMESTAMP(6) WHERE name = ? AND record = ?
-- delete
DELETE FROM {p}groups WHERE name = ? AND record = ?
