-- Redlock: lift this server's counter to at least the token just handed out, so the next
-- acquisition's majority, which shares a server with this one, counts on from there.
-- ARGV: token (digits). Refused, with the counter left as it is, when either is not a token.
local token = ARGV[1]
local current, why = counter()
if not current then
  return redis.error_reply('DLOCK the fencing counter ' .. TOKEN .. ' ' .. why ..
    '; no token is handed out from it')
end
if not string.match(token, '^%d+$') or #token > 16 or tonumber(token) > MAX_TOKEN then
  local shown = string.gsub(string.sub(token, 1, 40), '[^%w%p ]', '?')
  return redis.error_reply('DLOCK token ' .. shown .. ' is past ' .. MAX_TOKEN_TEXT)
end
if current < tonumber(token) then
  redis.call('SET', TOKEN, token)
end
return 1
