-- `dlock release --force`: remove every holder (each notices at its next renewal) and hand the
-- lock to the waiters first in line. The token counter stays, so tokens keep growing. Returns the
-- holders removed.
local now, seconds = clock()
prune(now)
local removed = live_holders(now)
redis.call('DEL', HOLDERS, OWNERS, KEPT)
grant_waiting(now, seconds)
return removed
