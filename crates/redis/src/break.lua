-- `dlock release --force`: remove every holder (each notices at its next renewal) and hand the
-- lock to the waiters first in line. The token counter stays, so tokens keep growing. The last run,
-- if one of them holds it, ends "forced". Returns the holders removed.
local now, seconds = clock()
prune(now)
local removed = live_holders(now)
-- The last run, when its holder is one of those removed and it has not ended: forced away now.
local token, acquired, ended, _, pid, whose, host = run_fields(run_record(LAST_RUN))
if ended == '-' then
  for i = 1, #removed, 3 do
    if removed[i] == whose then
      local at = string.format('%d', now)
      write_run(LAST_RUN, run_text(token, acquired, at, 'forced', pid, whose, host))
      break
    end
  end
end
redis.call('DEL', HOLDERS, OWNERS, KEPT)
grant_waiting(now, seconds)
return removed
