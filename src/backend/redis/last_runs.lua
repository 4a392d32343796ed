-- Reads only. Returns {last run, last success, now}: each record as stored, false for none, or a
-- note for a key of another type (another client's), which the reader shows as unreadable; then
-- the server's time in milliseconds, the clock that dated the records.
local out = {}
for i, key in ipairs({LAST_RUN, LAST_SUCCESS}) do
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    raw = '(' .. key .. ' is not a string key)'
  end
  out[i] = raw or false
end
out[3] = (clock())
return out
