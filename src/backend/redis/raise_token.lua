-- Redlock: lift this server's counter to at least the token just handed out, so the next
-- acquisition's majority, which shares a server with this one, counts on from there.
-- ARGV: token.
local token = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', TOKEN) or '0')
if current < token then
  redis.call('SET', TOKEN, token)
end
return 1
