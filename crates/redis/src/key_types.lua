-- Reads only. Run when another script met a key of the wrong type (WRONGTYPE), which Redis reports
-- naming no key: any client can write a key in dlock's namespace. Answers an error naming the
-- first key of the lock that is not of the type dlock keeps there, or 0 if none is (any more).
-- Each key is probed with a read the scripts already need (README's ACL), not with TYPE.
local expected = {
  {HOLDERS, 'sorted set', 'ZCARD'}, {OWNERS, 'hash', 'HGET'}, {TOKEN, 'string', 'GET'},
  {QUEUE, 'sorted set', 'ZCARD'}, {ALIVE, 'sorted set', 'ZCARD'}, {KEPT, 'hash', 'HGET'},
}
for _, key in ipairs(expected) do
  local reply
  if key[3] == 'HGET' then
    reply = redis.pcall('HGET', key[1], '-')
  else
    reply = redis.pcall(key[3], key[1])
  end
  if type(reply) == 'table' and reply.err then
    return redis.error_reply('DLOCK the key ' .. key[1] .. ' is not the ' .. key[2] ..
      ' dlock keeps there (another client wrote it?); delete it, or use another lock name')
  end
end
return 0
