-- Run once per connection of a Redis ACL user (not `default`) before it does anything: the first
-- command dlock needs that the user may not run, as "COMMAND on KEY-OR-CHANNEL", or "" when it may
-- run them all. KEYS[1]: a key of dlock's (dlock:{check}:holders), so key patterns are checked.
local key = KEYS[1] or ARGV[1]
local channel = 'dlock:wake:check'
local checks = {
  {'EVALSHA', '0000000000000000000000000000000000000000', '1', key},
  {'SCRIPT', 'LOAD', 'return 1'},
  {'ZADD', key, '0', 'x'}, {'ZREM', key, 'x'}, {'ZRANGE', key, '0', '-1'},
  {'ZRANGEBYSCORE', key, '0', '1'}, {'ZREMRANGEBYSCORE', key, '0', '1'},
  {'ZSCORE', key, 'x'}, {'ZRANK', key, 'x'}, {'ZCARD', key}, {'ZCOUNT', key, '0', '1'},
  {'HSET', key, 'x', 'y'}, {'HGET', key, 'x'}, {'HMGET', key, 'x'}, {'HDEL', key, 'x'},
  {'GET', key}, {'SET', key, 'x'}, {'INCR', key}, {'DEL', key},
  {'PEXPIRE', key, '1'}, {'PTTL', key}, {'SCAN', '0'},
  {'PUBLISH', channel, ''}, {'SUBSCRIBE', channel},
}
-- On Redis Cluster (the key comes as an argument there) grants go by sharded pub/sub, on a
-- channel in the lock's slot.
if not KEYS[1] then
  local shard = 'dlock:{check}:wake:check'
  table.insert(checks, {'SPUBLISH', shard, ''})
  table.insert(checks, {'SSUBSCRIBE', shard})
end
if redis.acl_check_cmd then
  for _, c in ipairs(checks) do
    local ok, allowed = pcall(redis.acl_check_cmd, unpack(c))
    if ok and not allowed then
      if c[1] == 'PUBLISH' or c[1] == 'SUBSCRIBE' then
        return c[1] .. ' on ' .. 'dlock:wake:*'
      elseif c[1] == 'SPUBLISH' or c[1] == 'SSUBSCRIBE' then
        return c[1] .. ' on dlock:{NAME}:wake:*'
      elseif #c > 2 and c[1] ~= 'SCRIPT' and c[1] ~= 'SCAN' and c[1] ~= 'EVALSHA' then
        return c[1] .. ' on dlock:*'
      end
      return c[1]
    end
  end
  return ''
end
-- Redis 6: no way to ask, so try the one command that comes after a script's writes. A message to
-- a channel nobody listens on changes nothing.
if not pcall(redis.call, 'PUBLISH', channel, '') then
  return 'PUBLISH on dlock:wake:*'
end
return ''
