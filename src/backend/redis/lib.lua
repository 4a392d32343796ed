-- Prepended to every dlock script. All keys of one lock share the hash tag `dlock:{NAME}`, so each
-- script touches one slot (it runs unchanged on Redis Cluster).
--   KEYS[1] holders  sorted set: owner id -> lease expiry (server ms)
--   KEYS[2] owners   hash: owner id -> "MODE TOKEN SINCE PID HOST"
--   KEYS[3] token    the fencing counter (never expires: tokens only grow)
--   KEYS[4] queue    sorted set: "OWNER:MODE" -> arrival ticket (server us), the FIFO of waiters
--   KEYS[5] alive    sorted set: "OWNER:MODE" -> waiter expiry (server ms), so a dead waiter leaves
-- Waiters are woken on the pub/sub channel `dlock:{NAME}:wake:OWNER` (a channel, not a key).

-- Before Redis 5 a script that reads TIME must ask for effects replication before it writes.
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local HOLDERS, OWNERS, TOKEN, QUEUE, ALIVE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local WAKE = string.gsub(HOLDERS, 'holders$', 'wake:')

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

-- Wake the first waiter, and only it, if it could now take the lock: one message per handoff
-- whatever the number of waiters.
local function wake_head()
  local head = redis.call('ZRANGE', QUEUE, 0, 0)[1]
  if head then
    local owner, mode = string.match(head, '^(%x+):(.+)$')
    if owner and admits(mode) then
      redis.call('PUBLISH', WAKE .. owner, 'wake')
    end
  end
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
