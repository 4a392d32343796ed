-- Redlock: lift this server's counter to at least the token just handed out, so the next
-- acquisition's majority, which shares a server with this one, counts on from there.
-- The last run, if this owner's and not ended, takes the token too (it was written with this
-- server's own), so that every server's record of the run names the token its command got.
-- ARGV: token (digits), owner. Refused, with the counter left as it is, when either is not a token.
local token, owner = ARGV[1], ARGV[2]
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
local _, acquired, ended, ending, pid, whose, host = run_fields(run_record(LAST_RUN))
if whose == owner and ended == '-' then
  write_run(LAST_RUN, run_text(token, acquired, ended, ending, pid, whose, host))
end
return 1
