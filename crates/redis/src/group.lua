-- A lock's concurrency group record (lock/group.rs). Not joined to lib.lua: it touches one key of
-- the lock, `dlock:{NAME}:group` (KEYS[1], in the lock's slot), and goes by EVAL, as only runs
-- with --supersede or --cancel-in-progress use it.
-- ARGV[1] 'read': returns the record's first ARGV[2] bytes ('' for none).
-- ARGV[1] 'swap': changes it only if it is still what the caller read (ARGV[2], '' for none), so
-- that no change falls between another's read and write: to ARGV[3] ('' removes it), kept ARGV[4]
-- ms, and publishes an empty message on the channel ARGV[5], for a holder that listens there
-- (a cue to read the record; an ACL user who may not publish only makes holders read later).
-- Returns 1 when changed, 0 when the record changed meanwhile (the caller reads again).
local now = redis.pcall('GETRANGE', KEYS[1], 0, ARGV[1] == 'read' and ARGV[2] or -1)
if type(now) == 'table' then
  return redis.error_reply('DLOCK the key ' .. KEYS[1] ..
    ' is not the string dlock keeps there (another client wrote it?); delete it')
end
if ARGV[1] == 'read' then
  return now
end
if now ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
end
redis.pcall('PUBLISH', ARGV[5], '')
return 1
