-- Give up everything this owner has in the lock: its lease if it holds one, its place in the
-- queue if it waits. Used for release, for a waiter that gives up, and to undo a Redlock
-- acquisition that missed the majority. Acts only on this owner's own entries.
-- ARGV: owner, mode. Returns 1 when a lease was released, else 0.
local owner, mode = ARGV[1], ARGV[2]
local member = owner .. ':' .. mode
local now = clock()
prune(now)
local released = redis.call('ZREM', HOLDERS, owner)
redis.call('HDEL', OWNERS, owner)
local left = redis.call('ZREM', QUEUE, member)
redis.call('ZREM', ALIVE, member)
if released == 1 or left == 1 then
  wake_head()
end
return released
