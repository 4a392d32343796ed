-- Prepended to every dlock script. All keys of one lock share the hash tag `dlock:{NAME}`, so each
-- script touches one slot (it runs unchanged on Redis Cluster).
--   KEYS[1] holders  sorted set: owner id -> lease expiry (server ms)
--   KEYS[2] owners   hash: owner id -> "MODE TOKEN SINCE PID HOST"
--   KEYS[3] token    the fencing counter (never expires: tokens only grow)
--   KEYS[4] queue    sorted set: waiter -> arrival ticket (server us), the FIFO of waiters
--   KEYS[5] alive    sorted set: waiter -> waiter expiry (server ms), so a dead waiter leaves
--   KEYS[6] kept     hash: owner id -> "UNTIL HOLD" (server ms; " ended" once released) for a
--                    holder with --min-hold: its entry in holders lasts at least until UNTIL, also
--                    past its release or its death, so the server's clock alone judges the hold
--   KEYS[7] last-run      string: the latest acquisition, and how it ended once it has, in the one
--                         text form every store keeps (lock/last_run.rs, `Run::record`):
--                         "run1 TOKEN ACQUIRED_MS ENDED_MS ENDING PID OWNER HOST[\tMESSAGE]", the
--                         times by this server's clock, ENDED_MS and ENDING "-" until it ends
--   KEYS[8] last-success  string: the latest run that succeeded, in the same form
--            Both outlive the lock (RUN_KEPT_MS after their last write). Another client's key of
--            another type there is left alone, and never stops a lock (see run_record).
--   KEYS[9] on Redis Cluster only: `dlock:{NAME}:wake`, never a key that exists: the prefix of the
--            lock's grant channels, in its slot
-- A waiter is "OWNER MODE TTL[:HOLD] PID HOST": all it takes to grant it the lock in its absence. A release
-- hands the lock to the waiters first in line and tells each with "dlock:{NAME} TOKEN": on Redis
-- Cluster by sharded pub/sub on `dlock:{NAME}:wake:OWNER` (SPUBLISH: only the lock's master and
-- its replicas carry it), elsewhere on the channel `dlock:wake:OWNER` (a channel, not a key).

-- Before Redis 5 a script that reads TIME must ask for effects replication before it writes.
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local HOLDERS, OWNERS, TOKEN, QUEUE, ALIVE, KEPT = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local LAST_RUN, LAST_SUCCESS = KEYS[7], KEYS[8]
local BASE = (string.gsub(HOLDERS, ':holders$', ''))
local WAKE = KEYS[9]

-- The largest token: Lua numbers are doubles, exact up to 2^53 - 1, and tokens must stay exact.
local MAX_TOKEN, MAX_TOKEN_TEXT = 9007199254740991, '9007199254740991'

-- The fencing counter as a number, or nil and what is wrong with it. Any client can write the key,
-- and dlock never wraps, repeats or resets a token: a counter that is not a whole number from 0 to
-- MAX_TOKEN is refused, and left as it is for an operator to look at.
local function counter()
  local raw = redis.pcall('GET', TOKEN)
  if type(raw) == 'table' then
    return nil, 'is not a string key'
  end
  if not raw then
    return 0
  end
  local n = string.match(raw, '^%d+$') and #raw <= 16 and tonumber(raw)
  if n and n <= MAX_TOKEN then
    return n
  end
  local shown = string.gsub(string.sub(raw, 1, 40), '[^%w%p ]', '?')
  return nil, 'holds "' .. shown .. '"' ..
    ', not a whole number from 0 to ' .. MAX_TOKEN_TEXT
end

-- Why the counter cannot hand out the next token (an error reply for the caller), or nil.
local function token_fault()
  local n, why = counter()
  if n and n < MAX_TOKEN then
    return nil
  end
  if n then
    why = 'is at ' .. string.format('%d', n) .. ', the last token dlock can hand out exactly'
  end
  return redis.error_reply('DLOCK the fencing counter ' .. TOKEN .. ' ' .. why ..
    '; no token is handed out from it')
end

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
    redis.call('HDEL', KEPT, unpack(dead))
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
  local limit = tonumber(string.match(mode, '^limit:(%d+)$') or '0')
  if limit == 0 and mode ~= 'shared' then
    -- Exclusive, or a mode this version never writes (a forged waiter): the same.
    return false
  end
  local seats = 0
  local records = redis.call('HMGET', OWNERS, unpack(owners))
  for _, record in ipairs(records) do
    -- A holder without a record, or with a mode this version never writes, counts as exclusive:
    -- never admit on missing data.
    local held = record and string.match(record, '^([^ ]+)') or 'exclusive'
    local seat = tonumber(string.match(held, '^limit:(%d+)$') or '0')
    if seat > 0 then
      seats = seats + 1
    elseif held ~= 'shared' then
      return false
    end
  end
  return mode == 'shared' or seats < limit
end

-- Make KEY live at least MS more milliseconds (keys of a lock nobody renews go away by themselves).
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Live holders as a flat list: owner, record, kept, owner, record, kept... (kept: what --min-hold
-- keeps, "UNTIL HOLD[ ended]", '' for none, so that a busy line can say why the lock is taken).
local function live_holders(now)
  local owners = redis.call('ZRANGEBYSCORE', HOLDERS, '(' .. now, '+inf')
  local out = {}
  if #owners > 0 then
    local records = redis.call('HMGET', OWNERS, unpack(owners))
    local kept = redis.call('HMGET', KEPT, unpack(owners))
    for i, owner in ipairs(owners) do
      out[#out + 1] = owner
      -- Shown as unreadable, and counted as exclusive.
      out[#out + 1] = records[i] or '(no record)'
      out[#out + 1] = kept[i] or ''
    end
  end
  return out
end

-- A waiter's entry in the queue (HOLD: its --min-hold in ms, 0 for none).
local function waiter(owner, mode, ttl, pid, host, hold)
  local lease = ttl
  if hold > 0 then
    lease = ttl .. ':' .. string.format('%d', hold)
  end
  return owner .. ' ' .. mode .. ' ' .. lease .. ' ' .. pid .. ' ' .. host
end

-- Until when --min-hold keeps OWNER's entry (server ms; 0: it does not).
local function kept_until(owner)
  local kept = redis.call('HGET', KEPT, owner)
  return kept and tonumber(string.match(kept, '^(%d+) ') or '0') or 0
end

-- OWNER's entry lasts TTL more, and at least until its min-hold ends.
local function extend(owner, now, ttl)
  local kept = kept_until(owner)
  local expiry = math.max(now + ttl, kept)
  redis.call('ZADD', HOLDERS, expiry, owner)
  keep(HOLDERS, expiry - now)
  keep(OWNERS, expiry - now)
  if kept > 0 then
    keep(KEPT, expiry - now)
  end
end

-- How long a run record lasts after its last write: 400 days (RUN_RECORD_KEPT_FOR), so that a
-- yearly job still finds its last run.
local RUN_KEPT_MS = 34560000000
-- The longest run record written (MAX_RUN_RECORD_BYTES): only a forged waiter's entry is longer.
local MAX_RUN_RECORD = 1024

-- The run record in KEY ('' when there is none), or nil when KEY is not a string: another
-- client's key, which is neither read nor written, and stops nothing.
local function run_record(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    return nil
  end
  return raw or ''
end

local function write_run(key, record)
  redis.call('SET', key, string.sub(record, 1, MAX_RUN_RECORD), 'PX', RUN_KEPT_MS)
end

-- A run record's fields: token, acquired, ended, ending, pid, owner, and the rest (host and
-- message); nothing for a record dlock would not write (any client can write the key).
local function run_fields(record)
  return string.match(record or '', '^run1 (%d+) (%S+) (%S+) (%S+) (%d+) (%S+) (.*)$')
end

local function run_text(token, acquired, ended, ending, pid, owner, host)
  return 'run1 ' .. token .. ' ' .. acquired .. ' ' .. ended .. ' ' .. ending .. ' ' .. pid ..
    ' ' .. owner .. ' ' .. host
end

-- OWNER's acquisition, with TOKEN at NOW, becomes the last run, not ended.
local function start_run(owner, token, now, pid, host)
  if run_record(LAST_RUN) then
    write_run(LAST_RUN, run_text(token, string.format('%d', now), '-', '-', pid, owner, host))
  end
end

-- OWNER's run ends NOW with ENDING (a wire word of lock::Ending; SUCCEEDED: it counts as a
-- success). The last run takes the ending only while it is still OWNER's and not ended: a later
-- acquisition's record is never overwritten, nor an ending already written (a run forced away
-- stays forced). A success is written as the last success whatever the last run is (a release
-- that finds its lease gone has made the ending 'lost' before: see release.lua). TOKEN: the
-- lease's ('' for the record's own); PID and HOST as the acquisition wrote them.
local function end_run(owner, token, ending, succeeded, now, pid, host)
  local last = run_record(LAST_RUN)
  local t, acquired, ended, _, _, whose = run_fields(last)
  local mine = whose == owner
  if token == '' then
    token = t or '0'
  end
  local at = string.format('%d', now)
  if mine and ended == '-' then
    write_run(LAST_RUN, run_text(token, acquired, at, ending, pid, owner, host))
  end
  if succeeded and run_record(LAST_SUCCESS) then
    if not mine then
      -- A later acquisition took the last run (shared holders): when this one began is in its
      -- holder record, to the second, while it holds.
      local held = redis.call('HGET', OWNERS, owner)
      local since = held and string.match(held, '^%S+ %d+ (%d+) ')
      acquired = since and since .. '000' or '-'
    end
    write_run(LAST_SUCCESS, run_text(token, acquired, at, ending, pid, owner, host))
  end
end

-- Make OWNER a holder with a new token; returns the token. The token only ever grows: INCR on a
-- key that never expires. The caller has checked the counter (token_fault). Written with %d: Lua
-- would write 1e+14 for a large number. HOLD: --min-hold in ms (0: none).
local function take(owner, mode, ttl, now, seconds, pid, host, hold)
  local token = redis.call('INCR', TOKEN)
  local text = string.format('%d', token)
  redis.call('HSET', OWNERS, owner, mode .. ' ' .. text .. ' ' .. seconds .. ' ' .. pid .. ' ' .. host)
  if hold > 0 then
    redis.call('HSET', KEPT, owner, string.format('%d %d', now + hold, hold))
  else
    redis.call('HDEL', KEPT, owner)
  end
  extend(owner, now, ttl)
  start_run(owner, text, now, pid, host)
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
    -- A counter that can hand out no token: grant nothing, and leave the waiters in line; each
    -- learns why from its own next attempt.
    if token_fault() then
      return
    end
    local owner, mode, ttl, hold, pid, host =
      string.match(head, '^(%x+) (%S+) (%d+):?(%d*) (%d+) (.*)$')
    if owner and not admits(mode) then
      return
    end
    redis.call('ZREM', QUEUE, head)
    redis.call('ZREM', ALIVE, head)
    -- An entry that does not parse was not written by this version: drop it, grant nothing.
    if owner then
      local token = take(owner, mode, tonumber(ttl), now, seconds, pid, host, tonumber(hold) or 0)
      local grant = BASE .. ' ' .. string.format('%d', token)
      -- A cluster node without sharded pub/sub (before Redis 7): the classic channel, which its
      -- waiters listen on instead.
      if not (WAKE and pcall(redis.call, 'SPUBLISH', WAKE .. ':' .. owner, grant)) then
        redis.call('PUBLISH', 'dlock:wake:' .. owner, grant)
      end
    end
  end
end
