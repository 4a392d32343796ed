-- Prepended to every dlock script. All keys of one lock share the hash tag `dlock:{NAME}`, so each
-- script touches one slot (it runs unchanged on Redis Cluster).
--   KEYS[1] holders  sorted set: owner id -> lease expiry (server ms)
--   KEYS[2] owners   hash: owner id -> "MODE TOKEN SINCE PID HOST"
--   KEYS[3] token    the fencing counter (never expires: tokens only grow)
--   KEYS[4] queue    sorted set: waiter -> arrival ticket (server us), the FIFO of waiters
--   KEYS[5] alive    sorted set: waiter -> waiter expiry (server ms), so a dead waiter leaves
-- A waiter is "OWNER MODE TTL PID HOST": all it takes to grant it the lock in its absence. A release
-- hands the lock to the waiters first in line and tells each on the pub/sub channel
-- `dlock:wake:OWNER` (a channel, not a key) with "dlock:{NAME} TOKEN".

-- Before Redis 5 a script that reads TIME must ask for effects replication before it writes.
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local HOLDERS, OWNERS, TOKEN, QUEUE, ALIVE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local BASE = (string.gsub(HOLDERS, ':holders$', ''))

-- The server's clock, the only one that judges expiry: {ms, "SECONDS", "MICROSECONDS"}.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t[1], t[2]
end

-- Drop expired holders and waiters that stopped checking in (crashed dlocks).
local function prune(now)
  local dead = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', now)
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', HOLDERS, '-inf', now)
    redis.call('HDEL', OWNERS, unpack(dead))
  end
  local gone = redis.call('ZRANGEBYSCORE', ALIVE, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', ALIVE, '-inf', now)
    redis.call('ZREM', QUEUE, unpack(gone))
  end
end

-- Can a holder in MODE join the current holders? Exclusive excludes everyone; shared and limit
-- holders share, and at most N limit holders take seats at once.
local function admits(mode)
  local owners = redis.call('ZRANGE', HOLDERS, 0, -1)
  if #owners == 0 then
    return true
  end
  if mode == 'exclusive' then
    return false
  end
  local seats = 0
  local records = redis.call('HMGET', OWNERS, unpack(owners))
  for _, record in ipairs(records) do
    -- A holder without a record is treated as exclusive: never admit on missing data.
    local held = record and string.match(record, '^(%S+)') or 'exclusive'
    if held == 'exclusive' then
      return false
    end
    if string.sub(held, 1, 6) == 'limit:' then
      seats = seats + 1
    end
  end
  local limit = tonumber(string.match(mode, '^limit:(%d+)$'))
  return limit == nil or seats < limit
end

-- Make KEY live at least MS more milliseconds (keys of a lock nobody renews go away by themselves).
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Live holders as a flat list: owner, record, owner, record...
local function live_holders(now)
  local owners = redis.call('ZRANGEBYSCORE', HOLDERS, '(' .. now, '+inf')
  local out = {}
  if #owners > 0 then
    local records = redis.call('HMGET', OWNERS, unpack(owners))
    for i, owner in ipairs(owners) do
      out[#out + 1] = owner
      out[#out + 1] = records[i] or 'exclusive 0 0 0 ?'
    end
  end
  return out
end

-- A waiter's entry in the queue.
local function waiter(owner, mode, ttl, pid, host)
  return owner .. ' ' .. mode .. ' ' .. ttl .. ' ' .. pid .. ' ' .. host
end

-- Make OWNER a holder with a new token; returns the token. The token only ever grows: INCR on a
-- key that never expires.
local function take(owner, mode, ttl, now, seconds, pid, host)
  local token = redis.call('INCR', TOKEN)
  redis.call('ZADD', HOLDERS, now + ttl, owner)
  redis.call('HSET', OWNERS, owner, mode .. ' ' .. token .. ' ' .. seconds .. ' ' .. pid .. ' ' .. host)
  keep(HOLDERS, ttl)
  keep(OWNERS, ttl)
  return token
end

-- Hand the lock on to the waiters first in line, in arrival order, while each can join the holders
-- (one exclusive waiter, or a run of shared and limit ones), and tell each on its channel: the
-- waiter starts without a command of its own, and a handoff costs the same whatever the number of
-- waiters. Stops at STOP, a waiter giving back what it took (it keeps its place, not the lock).
local function grant_waiting(now, seconds, stop)
  while true do
    local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
    if not head or head == stop then
      return
    end
    local owner, mode, ttl, pid, host = string.match(head, '^(%x+) (%S+) (%d+) (%d+) (.*)$')
    if owner and not admits(mode) then
      return
    end
    redis.call('ZREM', QUEUE, head)
    redis.call('ZREM', ALIVE, head)
    -- An entry that does not parse was not written by this version: drop it, grant nothing.
    if owner then
      local token = take(owner, mode, tonumber(ttl), now, seconds, pid, host)
      redis.call('PUBLISH', 'dlock:wake:' .. owner, BASE .. ' ' .. token)
    end
  end
end
