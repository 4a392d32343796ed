-- Take the lock, or report it busy (and, when waiting, keep a place in the queue).
-- ARGV: owner, mode, ttl ms, wait (1: queue when busy), ticket ('' the first time), pid, host,
-- min-hold ms (0: none).
-- Returns {1, token} when held, or {0, ticket, retry ms, counter, ahead, owner, record, kept, ...}
-- when busy (counter: the last token this server handed out, which Redlock's next token must exceed;
-- kept: what --min-hold keeps, see live_holders).
local owner, mode, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local waits, ticket, pid, host = ARGV[4] == '1', ARGV[5], ARGV[6], ARGV[7]
local hold = tonumber(ARGV[8]) or 0
local now, seconds, micros = clock()
prune(now)
local member = waiter(owner, mode, ttl, pid, host, hold)

-- Already ours: granted while we waited, or an earlier call's answer was lost. Same token.
local mine = redis.call('ZSCORE', HOLDERS, owner)
if mine then
  extend(owner, now, ttl)
  local record = redis.call('HGET', OWNERS, owner) or ''
  return {1, tonumber(string.match(record, '^%S+ (%d+)') or '0')}
end

-- Every other way on needs a counter that can hand out a token: refused before anything is written.
local fault = token_fault()
if fault then
  return fault
end

-- First come, first served: nobody may pass a live waiter that queued earlier.
local ahead
local rank = redis.call('ZRANK', QUEUE, member)
if rank then
  ahead = rank
elseif ticket ~= '' then
  ahead = redis.call('ZCOUNT', QUEUE, '-inf', '(' .. ticket)
else
  ahead = redis.call('ZCARD', QUEUE)
end

if ahead == 0 and admits(mode) then
  local token = take(owner, mode, ttl, now, seconds, pid, host, hold)
  if rank then
    redis.call('ZREM', QUEUE, member)
    redis.call('ZREM', ALIVE, member)
  end
  -- The next in line may be able to join (shared and limit holders): pass the turn on.
  grant_waiting(now, seconds)
  return {1, token}
end

if waits then
  if ticket == '' then
    ticket = seconds .. string.format('%06d', tonumber(micros))
  end
  redis.call('ZADD', QUEUE, ticket, member)
  redis.call('ZADD', ALIVE, now + ttl, member)
  keep(QUEUE, ttl)
  keep(ALIVE, ttl)
end

-- Look again when the first lease or waiter ahead runs out, if no grant comes first.
local retry = ttl
local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
if first[2] then
  retry = math.min(retry, tonumber(first[2]) - now)
end
local oldest = redis.call('ZRANGE', ALIVE, 0, 0, 'WITHSCORES')
if oldest[2] and oldest[1] ~= member then
  retry = math.min(retry, tonumber(oldest[2]) - now)
end
local reply = {0, ticket, math.max(retry, 1), (counter()), ahead}
for _, v in ipairs(live_holders(now)) do
  reply[#reply + 1] = v
end
return reply
