-- Takes the row lock on the counter of `$1` (making the row at a name's first use), first in the
-- transaction of acquire_free.sql and release_free.sql. Every change of a name's rows holds this
-- lock, and in READ COMMITTED each statement after it reads what was committed before it was
-- taken: so the statement that follows sees every holder and waiter there is.
INSERT INTO {s}.{p}tokens AS t (name, last_token) VALUES ($1, 0)
    ON CONFLICT (name) DO UPDATE SET last_token = t.last_token
