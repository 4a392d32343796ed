-- Who defined the routines dlock calls and the triggers on its tables, in the URL's database (see
-- recipe::Recipe::run), beside the account dlock connected as: a procedure runs with its
-- definer's rights (SQL SECURITY DEFINER, the default) or the caller's, a trigger with its
-- definer's, and each does what its definer wrote. Not views: one of a table's name runs with no
-- rights beyond its definer's, as a table someone else made holds what they wrote, which the
-- database's grants decide. `{routines}` and `{tables}` are dlock's names, as quoted strings.
-- The triggers are found by their table's schema (a trigger is always in its table's): compared
-- with a constant, it lets MariaDB open the triggers of that schema's tables only, where
-- `TRIGGER_SCHEMA` made it open those of every table of every database the account sees.
SELECT CONCAT('procedure ', ROUTINE_SCHEMA, '.', ROUTINE_NAME), DEFINER, CURRENT_USER()
  FROM information_schema.ROUTINES
 WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME IN ({routines})
UNION ALL
SELECT CONCAT('trigger ', TRIGGER_SCHEMA, '.', TRIGGER_NAME, ' on ', EVENT_OBJECT_TABLE), DEFINER,
       CURRENT_USER()
  FROM information_schema.TRIGGERS
 WHERE EVENT_OBJECT_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE IN ({tables})
