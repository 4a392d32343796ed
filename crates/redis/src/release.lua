-- Give up what this owner has in the lock: its lease if it holds one, and its place in the queue
-- unless told to keep it. Used for release, for a waiter that gives up, and to undo a Redlock
-- acquisition that missed the majority. Acts only on this owner's own entries.
-- ARGV: owner, mode, keep place ('1' or '0'), ticket, ttl ms, pid, host, min-hold ms, let go ('1':
-- the holder's command ended and its --min-hold keeps the lease; '0': given up at once, as an
-- undone or abandoned acquisition, or a run that --min-hold does not keep), token ('' when
-- unknown), ending (how the run ended, a wire word of lock::Ending; '' for a Redlock acquisition
-- that did not count: its record goes), succeeded ('1': the ending counts as a success).
-- Returns 1 when a lease was released, else 0.
local owner, mode, keep_place, ticket, ttl = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4], tonumber(ARGV[5])
local hold, let_go = tonumber(ARGV[8]) or 0, ARGV[9] == '1'
local token, ending, succeeded = ARGV[10] or '', ARGV[11] or '', ARGV[12] == '1'
local member = waiter(owner, mode, ttl, ARGV[6], ARGV[7], hold)
local now, seconds = clock()
prune(now)
-- The run's ending, before its holder record goes. A lease this server no longer has (it passed,
-- or was broken) ends the run 'lost' whatever the command did, and is no success: the command did
-- not hold the lock to its end, by this server's account.
if ending ~= '' then
  if not redis.call('ZSCORE', HOLDERS, owner) then
    ending, succeeded = 'lost', false
  end
  end_run(owner, token, ending, succeeded, now, ARGV[6], ARGV[7])
else
  local _, _, ended, _, _, whose = run_fields(run_record(LAST_RUN))
  if whose == owner and ended == '-' then
    redis.call('DEL', LAST_RUN)
  end
end
local released
local kept_end = kept_until(owner)
if let_go and kept_end > now and redis.call('ZSCORE', HOLDERS, owner) then
  -- Kept to its min-hold's end, by this server's clock, and no longer.
  redis.call('ZADD', HOLDERS, kept_end, owner)
  redis.call('HSET', KEPT, owner, string.format('%d %d ended', kept_end, hold))
  released = 1
else
  released = redis.call('ZREM', HOLDERS, owner)
  redis.call('HDEL', OWNERS, owner)
  redis.call('HDEL', KEPT, owner)
end
local left = 0
if keep_place then
  -- Undoing a Redlock grant, which took us out of this server's queue: stand in line again under
  -- the same ticket, so every server keeps the same order and the same first waiter.
  if ticket ~= '' then
    redis.call('ZADD', QUEUE, ticket, member)
    redis.call('ZADD', ALIVE, now + ttl, member)
    keep(QUEUE, ttl)
    keep(ALIVE, ttl)
  end
else
  left = redis.call('ZREM', QUEUE, member)
  redis.call('ZREM', ALIVE, member)
end
if released == 1 or left == 1 then
  grant_waiting(now, seconds, member)
end
return released
