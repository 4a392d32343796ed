-- Extend this owner's lease, only if it is still this owner's and not expired.
-- ARGV: owner, ttl ms. Returns 1 when renewed, 0 when the lock is no longer ours.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now, seconds = clock()
local expiry = redis.call('ZSCORE', HOLDERS, owner)
if not expiry then
  return 0
end
if tonumber(expiry) <= now then
  -- Expired: never revive it (someone may have taken the lock meanwhile). Clean it up instead,
  -- and hand the lock on.
  redis.call('ZREM', HOLDERS, owner)
  redis.call('HDEL', OWNERS, owner)
  redis.call('HDEL', KEPT, owner)
  prune(now)
  grant_waiting(now, seconds)
  return 0
end
extend(owner, now, ttl)
return 1
