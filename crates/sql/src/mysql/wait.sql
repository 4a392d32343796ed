-- Waits up to ? seconds for a lock key that another session holds while it holds or waits for a
-- lock: 1 once it is free (and let go again at once), 0 when the time ran out.
SELECT IF(GET_LOCK(?, ?) = 1, RELEASE_LOCK(?), 0)
