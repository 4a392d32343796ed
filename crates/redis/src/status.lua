-- Reads only. Returns {{owner, record, expiry, kept, ...}, {waiter, ticket, ...}}: the live holders,
-- each with its lease's expiry (server ms: the server's clock judges it) and what --min-hold keeps
-- ("UNTIL HOLD[ ended]", '' for none), and the live waiters in
-- arrival order (the first 1000).
local now = clock()
local holders = {}
local scored = redis.call('ZRANGEBYSCORE', HOLDERS, '(' .. now, '+inf', 'WITHSCORES')
if #scored > 0 then
  local owners = {}
  for i = 1, #scored, 2 do
    owners[#owners + 1] = scored[i]
  end
  local records = redis.call('HMGET', OWNERS, unpack(owners))
  local kept = redis.call('HMGET', KEPT, unpack(owners))
  for i, owner in ipairs(owners) do
    holders[#holders + 1] = owner
    -- Shown as unreadable, and counted as exclusive.
    holders[#holders + 1] = records[i] or '(no record)'
    holders[#holders + 1] = scored[2 * i]
    holders[#holders + 1] = kept[i] or ''
  end
end
local waiters = {}
local queue = redis.call('ZRANGE', QUEUE, 0, 999, 'WITHSCORES')
for i = 1, #queue, 2 do
  -- A waiter that stopped checking in is gone, though nobody pruned it yet.
  local alive = redis.call('ZSCORE', ALIVE, queue[i])
  if alive and tonumber(alive) > now then
    waiters[#waiters + 1] = queue[i]
    waiters[#waiters + 1] = queue[i + 1]
  end
end
return {holders, waiters}
