-- Who defined the routines dlock calls, the triggers on its tables, and views of its tables'
-- names, in the URL's database (see recipe::Recipe::run), beside the account dlock connected as:
-- a procedure runs with its definer's rights (SQL SECURITY DEFINER, the default), a trigger or a
-- view with its definer's, and any of them does what its definer wrote. `{routines}` and
-- `{tables}` are dlock's names, as quoted strings.
SELECT CONCAT('procedure ', ROUTINE_SCHEMA, '.', ROUTINE_NAME), DEFINER, CURRENT_USER()
  FROM information_schema.ROUTINES
 WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME IN ({routines})
UNION ALL
SELECT CONCAT('trigger ', TRIGGER_SCHEMA, '.', TRIGGER_NAME, ' on ', EVENT_OBJECT_TABLE), DEFINER,
       CURRENT_USER()
  FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE IN ({tables})
UNION ALL
SELECT CONCAT('view ', TABLE_SCHEMA, '.', TABLE_NAME), DEFINER, CURRENT_USER()
  FROM information_schema.VIEWS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({tables})
