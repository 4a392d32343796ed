-- dlock's tables and procedures, created on first use. `{p}` is the table prefix (default `dlock_`).
-- Statements are separated by lines of `;;` (as with the mysql client's DELIMITER); each is sent
-- alone. Created under GET_LOCK('{p}schema'), so two dlocks creating them at once do not collide;
-- a procedure that exists already (error 1304) is kept. Procedures are versioned by name (`_v1`,
-- `_v2`): a newer dlock adds its own beside them (an older dlock's stay, for it, and it makes
-- them again when they are missing). Every text is VARBINARY: names compare byte for byte
-- (no collation folds `A` into `a` or ignores a trailing space), and any bytes a client wrote read.
-- Times are DATETIME(6) in UTC, by the server's clock (UTC_TIMESTAMP(6)), never the client's.

-- The fencing counter of each name: the last token handed out. Raised in the transaction that
-- grants, so it is as durable as the grant; never AUTO_INCREMENT, which may go back after a crash.
CREATE TABLE IF NOT EXISTS {p}tokens (
    name VARBINARY(512) NOT NULL PRIMARY KEY,
    last_token BIGINT NOT NULL
) ENGINE = InnoDB
;;
-- The holders: one row per (name, owner). `expires_at` is the lease.
CREATE TABLE IF NOT EXISTS {p}locks (
    name VARBINARY(512) NOT NULL,
    owner VARBINARY(64) NOT NULL,
    mode VARBINARY(32) NOT NULL,
    token BIGINT NOT NULL,
    since DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    pid BIGINT NOT NULL,
    host VARBINARY(255) NOT NULL,
    message VARBINARY(1024) NULL,
    kept_until DATETIME(6) NULL,
    kept_note VARBINARY(64) NULL,
    PRIMARY KEY (name, owner)
) ENGINE = InnoDB
;;
-- --min-hold (added after the first version, so also to tables made before): until when the row
-- stays past its holder's release or death, by the server's clock (its lease is never shorter),
-- and "HOLD_MS[ ended]" for status. Only when missing (MySQL has no ADD COLUMN IF NOT EXISTS):
-- an ALTER TABLE waits for every transaction on the table, and needs a right the first run
-- otherwise does not.
SET @{p}alter = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE {p}locks ADD COLUMN kept_until DATETIME(6) NULL, ADD COLUMN kept_note VARBINARY(64) NULL',
    'DO 0')
  FROM information_schema.columns
 WHERE table_schema = DATABASE() AND table_name = '{p}locks' AND column_name = 'kept_until')
;;
PREPARE {p}alter FROM @{p}alter
;;
EXECUTE {p}alter
;;
DEALLOCATE PREPARE {p}alter
;;
-- The waiters in arrival order (the ticket only orders the waiters alive at one time); a waiter
-- renews `alive_until` while it waits, and one that stops doing so drops out of the line.
CREATE TABLE IF NOT EXISTS {p}queue (
    ticket BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARBINARY(512) NOT NULL,
    owner VARBINARY(64) NOT NULL,
    mode VARBINARY(32) NOT NULL,
    alive_until DATETIME(6) NOT NULL,
    since DATETIME(6) NULL,
    pid BIGINT NULL,
    host VARBINARY(255) NULL,
    message VARBINARY(1024) NULL,
    KEY {p}queue_by_name (name, ticket)
) ENGINE = InnoDB
;;
-- Who waits, for status (added after the first version, so also to tables made before; NULL in
-- a row an older dlock wrote): when it joined the line, its pid, host and --message, written by
-- the waiter just after it takes its place. Only when missing, as for {p}locks above.
SET @{p}alter = (SELECT IF(COUNT(*) = 0,
    'ALTER TABLE {p}queue ADD COLUMN since DATETIME(6) NULL, ADD COLUMN pid BIGINT NULL, ADD COLUMN host VARBINARY(255) NULL, ADD COLUMN message VARBINARY(1024) NULL',
    'DO 0')
  FROM information_schema.columns
 WHERE table_schema = DATABASE() AND table_name = '{p}queue' AND column_name = 'pid')
;;
PREPARE {p}alter FROM @{p}alter
;;
EXECUTE {p}alter
;;
DEALLOCATE PREPARE {p}alter
;;
-- The last run and the last success of each name (src/lock/last_run.rs), each in its one text
-- form (`Run::record`), its times and token written by the server: the last run by the
-- transaction that grants, its ending by the one that releases (only while the record is still
-- that run's, unchanged: the client hands back the record it was answered with). `written_at`:
-- the last write, by the server's clock; a name unwritten for 400 days is not shown, and its row
-- is deleted by a later `list` (expire_runs_v1). No index on it: every run writes the row, and
-- would pay for one. A table of its own, added beside an older dlock's three: an older dlock
-- neither reads nor writes it. Records are bounded by the columns.
CREATE TABLE IF NOT EXISTS {p}runs (
    name VARBINARY(512) NOT NULL PRIMARY KEY,
    last_run VARBINARY(1024) NULL,
    last_success VARBINARY(1024) NULL,
    written_at DATETIME(6) NOT NULL
) ENGINE = InnoDB
;;
-- The concurrency group record of each name (src/lock/group.rs: `run --supersede` and
-- `--cancel-in-progress`), changed by compare-and-set (group.sql). A table of its own, which an
-- older dlock neither reads nor writes; made by the first call of a dlock that finds it missing.
CREATE TABLE IF NOT EXISTS {p}groups (
    name VARBINARY(512) NOT NULL PRIMARY KEY,
    record BLOB NOT NULL,
    written_at DATETIME(6) NOT NULL
) ENGINE = InnoDB
;;
-- Extends the caller's own lease by the server's clock (an expired lease is never revived), and
-- keeps its lock key held by this session (a renewal after a reconnection takes it again); a
-- lease found gone gives the key up, so whoever waits on it goes on at once. 1: still ours.
-- v2: never ends a lease before its --min-hold's end.
CREATE PROCEDURE {p}renew_v2(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_ttl_ms BIGINT, IN p_key VARCHAR(64))
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_held BIGINT;
    SET v_held = (SELECT COUNT(*) FROM {p}locks
                   WHERE name = p_name AND owner = p_owner AND expires_at > v_now);
    UPDATE {p}locks
       SET expires_at = GREATEST(v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND,
                                 COALESCE(kept_until, v_now))
     WHERE name = p_name AND owner = p_owner AND expires_at > v_now;
    IF v_held > 0 THEN
        IF NOT (IS_USED_LOCK(p_key) <=> CONNECTION_ID()) THEN DO GET_LOCK(p_key, 0); END IF;
    ELSEIF IS_USED_LOCK(p_key) <=> CONNECTION_ID() THEN
        DO RELEASE_LOCK(p_key);
    END IF;
    SELECT v_held;
END
;;
-- Gives up `p_owner`'s hold on `p_name` and its lock key. 1: it was still held.
-- A row whose --min-hold has not ended stays until then, and no longer (its lease cut to
-- `kept_until`), marked ended for status; its key goes, so waiters learn at once to wait it out.
-- Serialised with every other change of the name by the counter's row lock, as an attempt
-- is, so that an attempt never sees this holder in one statement and not in the next (it would
-- find nobody to wait for, and wait for its re-check); the key goes after the commit.
-- v4: `p_keep` 0 gives the lock up at once, min-hold or not (a run that failed under
-- --release-on-failure, or ran nothing). Writes how the run ended (`p_ending`, by the server's
-- clock) into the last run when that is still this run's record, unchanged since its grant
-- wrote it (`p_head`, ' - - ', `p_tail`: owner ids are never reused, so no later run's record
-- and no ending is overwritten); and, `p_success`, as the last success whatever the last run
-- is. A lock no longer held (its lease passed, or it was broken) ends the run 'lost' whatever the
-- caller says, and is no success: the command did not hold the lock to its end. No record
-- (`p_head` NULL): nothing written.
CREATE PROCEDURE {p}release_v4(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_key VARCHAR(64), IN p_keep TINYINT,
    IN p_head VARBINARY(128), IN p_tail VARBINARY(1024), IN p_ending VARBINARY(32),
    IN p_success TINYINT)
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_held BIGINT;
    DECLARE v_counters BIGINT;
    DECLARE v_ended VARBINARY(1024);
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT COUNT(*) INTO v_counters FROM {p}tokens WHERE name = p_name FOR UPDATE;
    SET v_now = UTC_TIMESTAMP(6);
    SET v_held = (SELECT COUNT(*) FROM {p}locks
                   WHERE name = p_name AND owner = p_owner AND expires_at > v_now);
    IF v_held = 0 THEN
        SET p_ending = 'lost', p_success = 0;
    END IF;
    UPDATE {p}locks SET expires_at = kept_until, kept_note = CONCAT(kept_note, ' ended')
     WHERE name = p_name AND owner = p_owner AND expires_at > v_now AND kept_until > v_now
       AND kept_note NOT LIKE '% ended' AND p_keep;
    DELETE FROM {p}locks
     WHERE name = p_name AND owner = p_owner
       AND (NOT p_keep OR kept_until IS NULL OR kept_until <= v_now OR expires_at <= v_now);
    IF p_head IS NOT NULL THEN
        SET v_ended = CONCAT(p_head, ' ', TIMESTAMPDIFF(MICROSECOND, '1970-01-01', v_now) DIV 1000,
                             ' ', p_ending, ' ', p_tail);
        UPDATE {p}runs SET last_run = v_ended, written_at = v_now
         WHERE name = p_name AND last_run = CONCAT(p_head, ' - - ', p_tail);
        IF p_success THEN
            INSERT INTO {p}runs (name, last_success, written_at) VALUES (p_name, v_ended, v_now)
                ON DUPLICATE KEY UPDATE last_success = v_ended, written_at = v_now;
        END IF;
    END IF;
    COMMIT;
    IF IS_USED_LOCK(p_key) <=> CONNECTION_ID() THEN DO RELEASE_LOCK(p_key); END IF;
    SELECT v_held;
END
;;
-- renew_v2 that reads back what it wrote: a lease the server did not keep as written (a trigger
-- on the table, which dlock cannot forbid and may have been added after it checked, changed or
-- undid the change) is no renewal. 1: still ours, its lease ending where this wrote it; 0: lost
-- (the caller reports it, and ends its command before the lease it did not extend runs out), and
-- the key is given up. Nothing another session does between the update and the read changes a
-- live row of this owner but `release --force`, which makes it lost all the same.
CREATE PROCEDURE {p}renew_v3(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_ttl_ms BIGINT, IN p_key VARCHAR(64))
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_until DATETIME(6);
    DECLARE v_held BIGINT;
    SET v_until = v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND;
    UPDATE {p}locks SET expires_at = GREATEST(v_until, COALESCE(kept_until, v_now))
     WHERE name = p_name AND owner = p_owner AND expires_at > v_now;
    SET v_held = (SELECT COUNT(*) FROM {p}locks
                   WHERE name = p_name AND owner = p_owner
                     AND expires_at = GREATEST(v_until, COALESCE(kept_until, v_now)));
    IF v_held > 0 THEN
        IF NOT (IS_USED_LOCK(p_key) <=> CONNECTION_ID()) THEN DO GET_LOCK(p_key, 0); END IF;
    ELSEIF IS_USED_LOCK(p_key) <=> CONNECTION_ID() THEN
        DO RELEASE_LOCK(p_key);
    END IF;
    SELECT v_held;
END
;;
-- release_v4 that reads back what it changed, before it writes how the run ended: after it, no
-- row of `p_owner` is left but one a --min-hold keeps (`p_keep`), its lease cut to `kept_until`
-- as written. Anything else (a trigger on the table changed the cut) ends the run 'lost', no
-- success, and answers 0: the lock was not held as dlock holds it.
CREATE PROCEDURE {p}release_v5(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_key VARCHAR(64), IN p_keep TINYINT,
    IN p_head VARBINARY(128), IN p_tail VARBINARY(1024), IN p_ending VARBINARY(32),
    IN p_success TINYINT)
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_held BIGINT;
    DECLARE v_counters BIGINT;
    DECLARE v_ended VARBINARY(1024);
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT COUNT(*) INTO v_counters FROM {p}tokens WHERE name = p_name FOR UPDATE;
    SET v_now = UTC_TIMESTAMP(6);
    SET v_held = (SELECT COUNT(*) FROM {p}locks
                   WHERE name = p_name AND owner = p_owner AND expires_at > v_now);
    UPDATE {p}locks SET expires_at = kept_until, kept_note = CONCAT(kept_note, ' ended')
     WHERE name = p_name AND owner = p_owner AND expires_at > v_now AND kept_until > v_now
       AND kept_note NOT LIKE '% ended' AND p_keep;
    DELETE FROM {p}locks
     WHERE name = p_name AND owner = p_owner
       AND (NOT p_keep OR kept_until IS NULL OR kept_until <= v_now OR expires_at <= v_now);
    IF (SELECT COUNT(*) FROM {p}locks
         WHERE name = p_name AND owner = p_owner
           AND NOT (p_keep AND kept_until > v_now AND expires_at <=> kept_until)) > 0 THEN
        SET v_held = 0;
    END IF;
    IF v_held = 0 THEN
        SET p_ending = 'lost', p_success = 0;
    END IF;
    IF p_head IS NOT NULL THEN
        SET v_ended = CONCAT(p_head, ' ', TIMESTAMPDIFF(MICROSECOND, '1970-01-01', v_now) DIV 1000,
                             ' ', p_ending, ' ', p_tail);
        UPDATE {p}runs SET last_run = v_ended, written_at = v_now
         WHERE name = p_name AND last_run = CONCAT(p_head, ' - - ', p_tail);
        IF p_success THEN
            INSERT INTO {p}runs (name, last_success, written_at) VALUES (p_name, v_ended, v_now)
                ON DUPLICATE KEY UPDATE last_success = v_ended, written_at = v_now;
        END IF;
    END IF;
    COMMIT;
    IF IS_USED_LOCK(p_key) <=> CONNECTION_ID() THEN DO RELEASE_LOCK(p_key); END IF;
    SELECT v_held;
END
;;
-- Leaves `p_name`'s line (a waiter that gave up), and gives up its lock key; serialised with the
-- other changes of the name, as a release is (v2).
CREATE PROCEDURE {p}leave_v2(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_ticket BIGINT, IN p_key VARCHAR(64))
BEGIN
    DECLARE v_counters BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT COUNT(*) INTO v_counters FROM {p}tokens WHERE name = p_name FOR UPDATE;
    DELETE FROM {p}queue WHERE ticket = p_ticket AND owner = p_owner;
    COMMIT;
    IF IS_USED_LOCK(p_key) <=> CONNECTION_ID() THEN DO RELEASE_LOCK(p_key); END IF;
END
;;
-- Breaks `p_name` for every holder (`release --force`): returns the rows it removes. Their
-- sessions keep their keys until each notices at its next renewal and gives its key up.
-- v2: a removed holder whose lease still ran and whose run is the last run, not ended, has that
-- run ended `forced` now, by the server's clock (its own release then finds the record changed,
-- and leaves it so). The record is read as bytes of any content: only one of dlock's form is
-- changed.
CREATE PROCEDURE {p}break_v2(IN p_name VARBINARY(512))
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    INSERT INTO {p}tokens (name, last_token) VALUES (p_name, 0)
        ON DUPLICATE KEY UPDATE last_token = last_token;
    SET v_now = UTC_TIMESTAMP(6);
    SELECT name, owner, mode, CAST(token AS CHAR), TIMESTAMPDIFF(SECOND, '1970-01-01', since),
           CAST(pid AS CHAR), host, message, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at)
      FROM {p}locks WHERE name = p_name AND expires_at > v_now
     ORDER BY token FOR UPDATE;
    UPDATE {p}runs
       SET last_run = CONCAT(SUBSTRING_INDEX(last_run, ' ', 3), ' ',
                             TIMESTAMPDIFF(MICROSECOND, '1970-01-01', v_now) DIV 1000, ' forced ',
                             SUBSTRING(last_run, LENGTH(SUBSTRING_INDEX(last_run, ' ', 5)) + 2)),
           written_at = v_now
     WHERE name = p_name AND SUBSTRING_INDEX(last_run, ' ', 1) = 'run1'
       AND SUBSTRING_INDEX(SUBSTRING_INDEX(last_run, ' ', 4), ' ', -1) = '-'
       AND SUBSTRING_INDEX(SUBSTRING_INDEX(last_run, ' ', 5), ' ', -1) = '-'
       AND LENGTH(SUBSTRING_INDEX(last_run, ' ', 7)) < LENGTH(last_run)
       AND SUBSTRING_INDEX(SUBSTRING_INDEX(last_run, ' ', 7), ' ', -1) IN
           (SELECT owner FROM {p}locks WHERE name = p_name AND expires_at > v_now);
    DELETE FROM {p}locks WHERE name = p_name;
    COMMIT;
END
;;
-- Deletes up to 1000 rows of `{p}runs` of names unwritten for 400 days (which no read shows).
-- Called by `list`, before its listing: rarely, and it reads the whole table (a run pays for no
-- index on `written_at`).
CREATE PROCEDURE {p}expire_runs_v1()
BEGIN
    DELETE FROM {p}runs WHERE written_at < UTC_TIMESTAMP(6) - INTERVAL {kept_days} DAY LIMIT 1000;
END
;;
-- The last run and the last success of `p_name` as stored (any bytes: other clients may write
-- this table), at most {read} bytes of each (`Run::from_record` finds a longer one unreadable),
-- not shown once the name has gone unwritten for 400 days. A procedure, so that the EXECUTE a
-- user has on the database is all it needs to read them.
CREATE PROCEDURE {p}last_runs_v1(IN p_name VARBINARY(512))
BEGIN
    SELECT LEFT(last_run, {read}), LEFT(last_success, {read}) FROM {p}runs
     WHERE name = p_name AND written_at > UTC_TIMESTAMP(6) - INTERVAL {kept_days} DAY;
END
;;
-- One acquisition attempt on `p_name`, serialised with every other change of that name by the
-- row lock on its counter, all in one transaction on the server (a client paused mid-way holds
-- nothing). A stored mode counts as 'shared', 'limit' or (anything else, a foreign or garbled
-- row) exclusive, so a row dlock cannot read makes others wait and never lets two holders in.
-- Grants when the mode fits beside the live holders AND every live waiter ahead (counted as if
-- holding): first come, first served, while shared and limit waiters in a row go in together.
-- Busy: with `p_queue`, keeps (or takes) a place in line renewed for `p_ttl_ms`, and names the
-- blocker, the entry whose end to wait for: its owner and how long its lease or place lasts.
-- The caller's session holds the lock key `p_key` (GET_LOCK) while it holds or waits: a waiter
-- blocks on its blocker's key, which frees when the blocker releases, leaves or its session ends.
-- `p_hold_ms` (--min-hold, 0 for none) keeps the granted row until `since` + that long, its
-- lease never ending sooner; the blocker's `blocker_gone` is 1 when only a min-hold keeps it (its
-- holder let go and its key is free: wait for its end, not on its key).
-- A new place in line is written with who waits (since, pid, host, message: for status) in the
-- same statement; the blocker is judged by the same reading of the stored modes as the count (a
-- garbled `limit:` row is exclusive in both). What it found goes out in `o_*` (acquire_v5 answers
-- it): the token granted, or the place in line kept and the blocker.
-- v2: a grant also writes its run as the name's last run, `run1 TOKEN ACQUIRED_MS - - ` and
-- `p_tail` (`PID OWNER HOST[\tMESSAGE]`, the client's), and answers it (`o_run`); a grant found
-- already made answers the record that grant wrote, made again from its row.
CREATE PROCEDURE {p}attempt_v2(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_mode VARBINARY(32), IN p_limit INT,
    IN p_ttl_ms BIGINT, IN p_pid BIGINT, IN p_host VARBINARY(255), IN p_message VARBINARY(1024),
    IN p_key VARCHAR(64), IN p_queue TINYINT, IN p_ticket BIGINT, IN p_hold_ms BIGINT,
    IN p_tail VARBINARY(1024),
    OUT o_token BIGINT, OUT o_ticket BIGINT, OUT o_blocker VARBINARY(64), OUT o_blocker_us BIGINT,
    OUT o_blocker_gone TINYINT, OUT o_run VARBINARY(1024))
attempt: BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_mine BIGINT DEFAULT NULL;
    DECLARE v_since DATETIME(6) DEFAULT NULL;
    DECLARE v_run VARBINARY(1024);
    DECLARE v_last BIGINT;
    DECLARE v_kind CHAR(1);
    DECLARE v_ticket BIGINT DEFAULT NULL;
    DECLARE v_excl BIGINT;
    DECLARE v_seats BIGINT;
    DECLARE v_total BIGINT;
    DECLARE v_fits BOOLEAN;
    DECLARE v_took BOOLEAN DEFAULT FALSE;
    DECLARE v_block_owner VARBINARY(64) DEFAULT NULL;
    DECLARE v_block_us BIGINT DEFAULT NULL;
    DECLARE v_block_gone BOOLEAN DEFAULT FALSE;
    DECLARE v_kept DATETIME(6) DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        IF v_took THEN DO RELEASE_LOCK(p_key); END IF;
        RESIGNAL;
    END;
    -- The key first, so that whoever sees this entry finds its key held.
    IF NOT (IS_USED_LOCK(p_key) <=> CONNECTION_ID()) THEN
        SET v_took = (GET_LOCK(p_key, 0) <=> 1);
    END IF;
    SET v_kind = CASE
        WHEN p_mode = 'shared' THEN 's'
        WHEN p_mode LIKE 'limit:%' THEN 'l'
        ELSE 'x'
    END;
    -- No gap locks: changes of different names never wait for each other.
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    INSERT INTO {p}tokens (name, last_token) VALUES (p_name, 0)
        ON DUPLICATE KEY UPDATE last_token = last_token;
    SELECT last_token INTO v_last FROM {p}tokens WHERE name = p_name FOR UPDATE;
    SET v_now = UTC_TIMESTAMP(6);
    DELETE FROM {p}locks WHERE name = p_name AND expires_at <= v_now;
    DELETE FROM {p}queue WHERE name = p_name AND alive_until <= v_now;
    IF p_ticket IS NOT NULL THEN
        SET v_ticket = (SELECT ticket FROM {p}queue WHERE ticket = p_ticket AND owner = p_owner);
    END IF;
    -- Granted already, to this very acquisition (owner ids are never reused), by an attempt whose
    -- answer was lost on the way: the same grant, its lease renewed.
    SET v_mine = (SELECT token FROM {p}locks WHERE name = p_name AND owner = p_owner);
    SET v_since = (SELECT since FROM {p}locks WHERE name = p_name AND owner = p_owner);
    IF v_mine IS NOT NULL THEN
        UPDATE {p}locks
           SET expires_at = GREATEST(v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND,
                                     COALESCE(kept_until, v_now))
         WHERE name = p_name AND owner = p_owner;
        DELETE FROM {p}queue WHERE ticket = v_ticket;
        COMMIT;
        SET o_token = v_mine;
        SET o_run = CONCAT('run1 ', v_mine, ' ',
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01', v_since) DIV 1000, ' - - ',
                           p_tail);
        LEAVE attempt;
    END IF;
    SELECT COALESCE(SUM(k = 'x'), 0), COALESCE(SUM(k = 'l'), 0), COUNT(*)
      INTO v_excl, v_seats, v_total
      FROM (SELECT CASE WHEN mode = 'shared' THEN 's'
                        WHEN mode LIKE 'limit:%'
                         AND CONCAT('limit:', CAST(SUBSTRING(mode, 7) AS UNSIGNED)) = mode
                         AND CAST(SUBSTRING(mode, 7) AS UNSIGNED) >= 1 THEN 'l'
                        ELSE 'x' END AS k
              FROM {p}locks WHERE name = p_name
            UNION ALL
            SELECT CASE WHEN mode = 'shared' THEN 's'
                        WHEN mode LIKE 'limit:%'
                         AND CONCAT('limit:', CAST(SUBSTRING(mode, 7) AS UNSIGNED)) = mode
                         AND CAST(SUBSTRING(mode, 7) AS UNSIGNED) >= 1 THEN 'l'
                        ELSE 'x' END
              FROM {p}queue
             WHERE name = p_name AND (v_ticket IS NULL OR ticket < v_ticket)) AS ahead;
    SET v_fits = CASE v_kind
        WHEN 'x' THEN v_total = 0
        WHEN 's' THEN v_excl = 0
        ELSE v_excl = 0 AND v_seats < p_limit
    END;
    IF v_fits THEN
        IF p_hold_ms > 0 THEN
            SET v_kept = v_now + INTERVAL p_hold_ms * 1000 MICROSECOND;
        END IF;
        UPDATE {p}tokens SET last_token = v_last + 1 WHERE name = p_name;
        INSERT INTO {p}locks (name, owner, mode, token, since, expires_at, pid, host, message,
                              kept_until, kept_note)
        VALUES (p_name, p_owner, p_mode, v_last + 1, v_now,
                GREATEST(v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND, COALESCE(v_kept, v_now)),
                p_pid, p_host, p_message, v_kept, IF(v_kept IS NULL, NULL, CAST(p_hold_ms AS CHAR)));
        IF v_ticket IS NOT NULL THEN
            DELETE FROM {p}queue WHERE ticket = v_ticket;
        END IF;
        SET v_run = CONCAT('run1 ', v_last + 1, ' ',
                           TIMESTAMPDIFF(MICROSECOND, '1970-01-01', v_now) DIV 1000, ' - - ',
                           p_tail);
        INSERT INTO {p}runs (name, last_run, written_at) VALUES (p_name, v_run, v_now)
            ON DUPLICATE KEY UPDATE last_run = v_run, written_at = v_now;
        COMMIT;
        SET o_token = v_last + 1, o_run = v_run;
    ELSE
        IF p_queue THEN
            IF v_ticket IS NULL THEN
                INSERT INTO {p}queue (name, owner, mode, alive_until, since, pid, host, message)
                VALUES (p_name, p_owner, p_mode, v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND,
                        v_now, p_pid, p_host, p_message);
                SET v_ticket = LAST_INSERT_ID();
            ELSE
                UPDATE {p}queue SET alive_until = v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND
                 WHERE ticket = v_ticket;
            END IF;
        END IF;
        -- The blocker: the last waiter ahead that conflicts, else the oldest holder that does (an
        -- exclusive one for shared and limit requests; for a limit with no exclusive ahead, a seat).
        SELECT e.owner, TIMESTAMPDIFF(MICROSECOND, v_now, e.until), e.gone
          INTO v_block_owner, v_block_us, v_block_gone
          FROM (SELECT owner, expires_at AS until, 0 AS grp, -token AS ord,
                       CASE WHEN mode = 'shared' THEN 's'
                            WHEN mode LIKE 'limit:%'
                             AND CONCAT('limit:', CAST(SUBSTRING(mode, 7) AS UNSIGNED)) = mode
                             AND CAST(SUBSTRING(mode, 7) AS UNSIGNED) >= 1 THEN 'l'
                            ELSE 'x' END AS k,
                       COALESCE(kept_note LIKE '% ended', FALSE) AS gone
                  FROM {p}locks WHERE name = p_name
                UNION ALL
                SELECT owner, alive_until, 1, ticket,
                       CASE WHEN mode = 'shared' THEN 's'
                            WHEN mode LIKE 'limit:%'
                             AND CONCAT('limit:', CAST(SUBSTRING(mode, 7) AS UNSIGNED)) = mode
                             AND CAST(SUBSTRING(mode, 7) AS UNSIGNED) >= 1 THEN 'l'
                            ELSE 'x' END, FALSE
                  FROM {p}queue
                 WHERE name = p_name AND (v_ticket IS NULL OR ticket < v_ticket)) AS e
         WHERE v_kind = 'x' OR e.k = 'x' OR (v_kind = 'l' AND v_excl = 0 AND e.k = 'l')
         ORDER BY e.grp DESC, e.ord DESC
         LIMIT 1;
        COMMIT;
        IF v_took AND NOT p_queue THEN
            DO RELEASE_LOCK(p_key);
        END IF;
        SET o_ticket = v_ticket, o_blocker = v_block_owner, o_blocker_us = GREATEST(0, v_block_us),
            o_blocker_gone = COALESCE(v_block_gone, 0);
    END IF;
END attempt
;;
-- Created last but acquire_v6, which calls it: every lock starts with that call, so a dlock that
-- finds it has the other procedures too (a first run still making them cannot be overtaken by
-- another's release).
-- An attempt (attempt_v2); a busy one that took or kept a place in line then waits, for up to
-- `p_wait_ms` (and no longer than the blocker's lease or place lasts), on the blocker's lock key,
-- the prefix and the first 128 bits of SHA-256(owner, 0, name) in hexadecimal as dlock names it;
-- when the key frees (or was free), it lets it go and tries once more. So the common wait of a
-- busy lock, the holder releasing within moments, costs the waiter one call, not an attempt, a
-- wait and an attempt. Answers one row: the last attempt's, with `waited_out` 1 when the wait ran
-- out on this blocker's key (still held: the caller goes on waiting on it), and `found_free`
-- the owner whose key was free (when the last attempt names it again, its key is not held by its
-- entry: the caller does not wait on it, which would end at once, but until the entry's end).
-- v5: the attempt writes its run as the last run (see attempt_v2); `run` answers it.
CREATE PROCEDURE {p}acquire_v5(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_mode VARBINARY(32), IN p_limit INT,
    IN p_ttl_ms BIGINT, IN p_pid BIGINT, IN p_host VARBINARY(255), IN p_message VARBINARY(1024),
    IN p_key VARCHAR(64), IN p_queue TINYINT, IN p_ticket BIGINT, IN p_hold_ms BIGINT,
    IN p_wait_ms BIGINT, IN p_tail VARBINARY(1024))
BEGIN
    DECLARE v_token BIGINT;
    DECLARE v_ticket BIGINT;
    DECLARE v_blocker VARBINARY(64);
    DECLARE v_us BIGINT;
    DECLARE v_gone TINYINT;
    DECLARE v_key VARCHAR(64);
    DECLARE v_free INT DEFAULT NULL;
    DECLARE v_waited_out TINYINT DEFAULT 0;
    DECLARE v_found_free VARBINARY(64) DEFAULT NULL;
    DECLARE v_run VARBINARY(1024) DEFAULT NULL;
    CALL {p}attempt_v2(p_name, p_owner, p_mode, p_limit, p_ttl_ms, p_pid, p_host, p_message, p_key,
                       p_queue, p_ticket, p_hold_ms, p_tail, v_token, v_ticket, v_blocker, v_us,
                       v_gone, v_run);
    IF v_token IS NULL AND v_ticket IS NOT NULL AND p_wait_ms > 0 AND v_blocker IS NOT NULL
       AND v_gone = 0 THEN
        SET v_key = CONCAT('{p}', LEFT(SHA2(CONCAT(v_blocker, X'00', p_name), 256), 32));
        BEGIN
            -- Refused (a deadlock among lock keys, which only a broken entry can cause): as if
            -- still held; the caller's own wait finds out.
            DECLARE CONTINUE HANDLER FOR SQLEXCEPTION SET v_free = 0;
            SET v_free = GET_LOCK(v_key,
                                 LEAST(p_wait_ms * 1000, GREATEST(COALESCE(v_us, 0), 1000)) / 1000000);
        END;
        IF v_free = 1 THEN
            DO RELEASE_LOCK(v_key);
            SET v_found_free = v_blocker;
            CALL {p}attempt_v2(p_name, p_owner, p_mode, p_limit, p_ttl_ms, p_pid, p_host,
                               p_message, p_key, p_queue, v_ticket, p_hold_ms, p_tail, v_token,
                               v_ticket, v_blocker, v_us, v_gone, v_run);
        ELSE
            SET v_waited_out = 1;
        END IF;
    END IF;
    SELECT v_token AS granted_token, v_ticket AS queue_ticket, v_blocker AS blocker,
           v_us AS blocker_us, COALESCE(v_gone, 0) AS blocker_gone, v_waited_out AS waited_out,
           v_found_free AS found_free, v_run AS run;
END
;;
-- Created last (after acquire_v5, which it calls): a dlock that finds it has renew_v3 and
-- release_v5 too, which an older dlock's schema lacks (it is made again beside it then).
CREATE PROCEDURE {p}acquire_v6(
    IN p_name VARBINARY(512), IN p_owner VARBINARY(64), IN p_mode VARBINARY(32), IN p_limit INT,
    IN p_ttl_ms BIGINT, IN p_pid BIGINT, IN p_host VARBINARY(255), IN p_message VARBINARY(1024),
    IN p_key VARCHAR(64), IN p_queue TINYINT, IN p_ticket BIGINT, IN p_hold_ms BIGINT,
    IN p_wait_ms BIGINT, IN p_tail VARBINARY(1024))
BEGIN
    CALL {p}acquire_v5(p_name, p_owner, p_mode, p_limit, p_ttl_ms, p_pid, p_host, p_message,
                       p_key, p_queue, p_ticket, p_hold_ms, p_wait_ms, p_tail);
END
