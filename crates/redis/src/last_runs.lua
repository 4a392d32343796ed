-- Reads only. Returns {last run, last success, now}: each record as stored, at most one byte more
-- than the longest record dlock writes (a longer value, anyone's, is unreadable without the whole
-- of it crossing the network: GETRANGE, not GET), false for none, or a note for a key of another
-- type (another client's), which the reader shows as unreadable; then the server's time in
-- milliseconds, the clock that dated the records.
local out = {}
for i, key in ipairs({LAST_RUN, LAST_SUCCESS}) do
  local raw = false
  if redis.call('EXISTS', key) == 1 then
    raw = redis.pcall('GETRANGE', key, 0, MAX_RUN_RECORD)
    if type(raw) == 'table' then
      raw = '(' .. key .. ' is not a string key)'
    end
  end
  out[i] = raw
end
out[3] = (clock())
return out
