-- Give up what this owner has in the lock: its lease if it holds one, and its place in the queue
-- unless told to keep it. Used for release, for a waiter that gives up, and to undo a Redlock
-- acquisition that missed the majority (keeping the place: the waiter tries again). Acts only on
-- this owner's own entries.
-- ARGV: owner, mode, keep place ('1' or '0'). Returns 1 when a lease was released, else 0.
local owner, mode, keep_place = ARGV[1], ARGV[2], ARGV[3] == '1'
local member = owner .. ':' .. mode
local now = clock()
prune(now)
local released = redis.call('ZREM', HOLDERS, owner)
redis.call('HDEL', OWNERS, owner)
local left = 0
if not keep_place then
  left = redis.call('ZREM', QUEUE, member)
  redis.call('ZREM', ALIVE, member)
end
if released == 1 or left == 1 then
  wake_head()
end
return released
