-- `dlock release --force`: remove every holder (each notices at its next renewal) and wake the
-- first waiter. The token counter stays, so tokens keep growing. Returns the holders removed.
local removed = live_holders(clock())
redis.call('DEL', HOLDERS, OWNERS)
wake_head()
return removed
