//! Who may own what dlock uses on MySQL: an account without the rights to make dlock's objects is
//! told the grant to ask for, and procedures and triggers another account defined on them, before
//! dlock ran or while it holds, are refused or found out, never run as dlock's.

use super::*;

#[test]
fn a_user_without_ddl_rights_is_told_the_grant_to_ask_for_and_the_minimal_grants_suffice() {
    let server = MyServer::shared().lock().unwrap();
    server.sql(
        "DROP USER IF EXISTS lowly@'127.0.0.1'; \
         CREATE USER lowly@'127.0.0.1' IDENTIFIED BY 'low-SECRET'; \
         GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON dlock.* TO lowly@'127.0.0.1'",
    );
    let port = server.port();
    drop(server);
    let lowly = format!("mysql://lowly:low-SECRET@127.0.0.1:{port}/{DATABASE}?prefix=t_ddl_");
    let out = output(mysql_dlock(&lowly, &["run", "d", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("an administrator must run once: GRANT CREATE, CREATE ROUTINE ON `dlock`.* TO 'lowly'@'127.0.0.1'"),
        "{err}"
    );
    assert!(!err.contains("SECRET"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // Once an administrator made the tables, the README's grants are all a user needs.
    let admin = MyServer::shared_url("t_min_");
    let out = output(mysql_dlock(&admin, &["status", "d"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let server = MyServer::shared().lock().unwrap();
    server.sql(
        "DROP USER IF EXISTS runner@'127.0.0.1'; \
         CREATE USER runner@'127.0.0.1' IDENTIFIED BY 'run-SECRET'; \
         GRANT EXECUTE ON dlock.* TO runner@'127.0.0.1'; \
         GRANT SELECT ON dlock.t_min_locks TO runner@'127.0.0.1'; \
         DROP USER IF EXISTS runner2@'127.0.0.1'; \
         CREATE USER runner2@'127.0.0.1' IDENTIFIED BY 'run-SECRET'; \
         GRANT EXECUTE ON dlock.* TO runner2@'127.0.0.1'",
    );
    drop(server);
    // The procedures are root's: a user that does not name root in owner= refuses them.
    let bare = format!("mysql://runner:run-SECRET@127.0.0.1:{port}/{DATABASE}?prefix=t_min_");
    let out = output(mysql_dlock(&bare, &["run", "d", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refusing procedure dlock.t_min_")
            && stderr(&out).contains("defined by root@"),
        "{}",
        stderr(&out)
    );
    let runner =
        format!("mysql://runner:run-SECRET@127.0.0.1:{port}/{DATABASE}?prefix=t_min_&owner=root");
    let runner2 = format!(
        "mysql://runner2:run-SECRET@127.0.0.1:{port}/{DATABASE}?prefix=t_min_&owner=someone,root"
    );
    let dir = LockDir::new();
    let mut held = holder(&runner, &dir, &[], "d", "h");
    let out = output(mysql_dlock(&runner, &["status", "d"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Without SELECT on the queue (what an older dlock's grants gave), no waiters are shown (an
    // empty array, as JSON always has it), and status still answers.
    let waiters = |url: &str| {
        let out = output(mysql_dlock(url, &["status", "--json", "d"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        json["waiters"].clone()
    };
    assert_eq!(waiters(&runner), serde_json::json!([]));
    MyServer::shared()
        .lock()
        .unwrap()
        .sql("GRANT SELECT ON dlock.t_min_queue TO runner@'127.0.0.1'");
    assert_eq!(waiters(&runner), serde_json::json!([]));
    // Two users share the administrator's tables: the second finds the lock busy, then gets it.
    let out = output(mysql_dlock(&runner2, &["run", "-n", "d", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let_go(&dir, "h");
    assert!(wait_exit(&mut held, T).success());
    let out = output(mysql_dlock(&runner2, &["run", "-n", "d", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(mysql_dlock(&runner, &["release", "--force", "d"]));
    assert!(code(&out) == 0 || code(&out) == 1, "{}", stderr(&out));
}

/// Another account that may create routines and triggers in the database: a procedure of
/// dlock's name it made before dlock ran (dlock keeps a procedure that exists, and it would run
/// with its definer's rights and answer what it likes: here a grant with token 42), and a
/// trigger it added on dlock's table, are each refused with 69, naming the object and its
/// definer; the command never runs and the trigger never fires.
#[test]
fn procedures_and_triggers_defined_by_another_account_are_refused() {
    let server = MyServer::shared().lock().unwrap();
    server.sql(
        "DROP USER IF EXISTS t_mallory@'127.0.0.1'; \
         CREATE USER t_mallory@'127.0.0.1' IDENTIFIED BY 'mal-SECRET'; \
         GRANT CREATE ROUTINE, EXECUTE, TRIGGER, INSERT ON dlock.* TO t_mallory@'127.0.0.1'; \
         DROP PROCEDURE IF EXISTS t_evil_acquire_v5; \
         CREATE DEFINER = t_mallory@'127.0.0.1' PROCEDURE t_evil_acquire_v5(\
           IN a VARBINARY(512), IN b VARBINARY(64), IN c VARBINARY(32), IN d INT, IN e BIGINT, \
           IN f BIGINT, IN g VARBINARY(255), IN h VARBINARY(1024), IN i VARCHAR(64), \
           IN j TINYINT, IN k BIGINT, IN l BIGINT, IN m BIGINT, IN n VARBINARY(1024)) \
           SELECT 42 AS granted_token, NULL, NULL, NULL, 0, 0, NULL, NULL",
    );
    drop(server);
    let dir = LockDir::new();
    let ran = dir.file("ran");
    let evil = MyServer::shared_url("t_evil_");
    let script = format!("echo $DLOCK_TOKEN > '{}'", ran.display());
    let out = output(mysql_dlock(&evil, &["run", "x", "--", "sh", "-c", &script]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        !ran.exists(),
        "the command ran with token {}",
        token(&dir, "ran")
    );
    let err = stderr(&out);
    assert!(
        err.contains("refusing procedure dlock.t_evil_acquire_v5 defined by t_mallory@127.0.0.1"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // dlock's own tables and procedures, and a trigger of the other account's on one of them.
    let own = MyServer::shared_url("t_evtrg_");
    let out = output(mysql_dlock(&own, &["run", "x", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let server = MyServer::shared().lock().unwrap();
    server.sql(
        "DROP TABLE IF EXISTS t_evtrg_fired; CREATE TABLE t_evtrg_fired (n INT); \
         CREATE DEFINER = t_mallory@'127.0.0.1' TRIGGER t_evtrg_spy BEFORE INSERT ON t_evtrg_locks \
           FOR EACH ROW INSERT INTO t_evtrg_fired VALUES (1)",
    );
    drop(server);
    let out = output(mysql_dlock(&own, &["run", "x", "--", "true"]));
    // The same on the table of the last runs, added after the first three.
    let server = MyServer::shared().lock().unwrap();
    server.sql(
        "DROP TRIGGER t_evtrg_spy; \
         CREATE DEFINER = t_mallory@'127.0.0.1' TRIGGER t_evtrg_spy2 BEFORE UPDATE ON t_evtrg_runs \
           FOR EACH ROW INSERT INTO t_evtrg_fired VALUES (2)",
    );
    drop(server);
    let on_runs = output(mysql_dlock(&own, &["run", "x", "--", "true"]));
    let server = MyServer::shared().lock().unwrap();
    let fired = server.sql("SELECT COUNT(*) FROM t_evtrg_fired");
    server.sql(
        "DROP TRIGGER t_evtrg_spy2; DROP TABLE t_evtrg_fired; DROP PROCEDURE t_evil_acquire_v5; \
         DROP USER t_mallory@'127.0.0.1'",
    );
    drop(server);
    assert_eq!(code(&on_runs), 69, "{}", stderr(&on_runs));
    assert!(
        stderr(&on_runs).contains(
            "refusing trigger dlock.t_evtrg_spy2 on t_evtrg_runs defined by t_mallory@127.0.0.1"
        ),
        "{}",
        stderr(&on_runs)
    );
    assert_eq!(fired, "0", "{}", stderr(&out));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "refusing trigger dlock.t_evtrg_spy on t_evtrg_locks defined by t_mallory@127.0.0.1"
        ),
        "{}",
        stderr(&out)
    );
}

/// An account with no rights on dlock's locks table but `TRIGGER`, `SELECT` and `UPDATE` (without
/// them MariaDB refuses the trigger's change, and the renewal fails) adds, while a holder (ttl 2s)
/// renews and a waiter (ttl 300ms: it re-checks often) waits, a trigger that keeps renewals from
/// extending the lease (each pulls it back 300 ms from where it was). New sessions refuse the
/// trigger (69); these two checked before it existed. The holder's next renewal finds its lease
/// not where it wrote it, reports the lock lost and ends its command (79); the waiter gets in only
/// after that command ended: never two holders at once (before, the renewals said "held" until
/// the lease had run out, and the waiter got in beside the running command).
#[test]
fn a_trigger_added_during_a_hold_that_holds_the_lease_back_is_a_lost_lock_never_two_holders() {
    let dir = LockDir::new();
    let url = MyServer::shared_url("t_frz_");
    let made = output(mysql_dlock(&url, &["run", "x", "--", "true"]));
    assert_eq!(code(&made), 0, "{}", stderr(&made));
    let d = dir.path().display();
    let holder_script = format!(
        "echo $DLOCK_TOKEN > '{d}/h.in'; trap \"echo > '{d}/h.end'; exit 0\" TERM; i=0; \
         while [ ! -e '{d}/h.go' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         echo > '{d}/h.end'"
    );
    let waiter_script =
        format!("[ -e '{d}/h.end' ] || echo > '{d}/overlap'; echo $DLOCK_TOKEN > '{d}/w.in'");
    let mut held = mysql_dlock(
        &url,
        &["run", "--ttl", "2s", "x", "--", "sh", "-c", &holder_script],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("start the holder");
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = mysql_dlock(
        &url,
        &[
            "run",
            "--ttl",
            "300ms",
            "--wait",
            "60s",
            "x",
            "--",
            "sh",
            "-c",
            &waiter_script,
        ],
    )
    .spawn()
    .expect("start the waiter");
    let server = MyServer::shared().lock().unwrap();
    wait_until("the waiter in line", T, || {
        server.sql("SELECT COUNT(*) FROM t_frz_queue WHERE name = 'x'") == "1"
    });
    server.sql(
        "DROP USER IF EXISTS t_frz_mallory@'127.0.0.1'; \
         CREATE USER t_frz_mallory@'127.0.0.1' IDENTIFIED BY 'frz-SECRET'; \
         GRANT TRIGGER, SELECT, UPDATE ON dlock.t_frz_locks TO t_frz_mallory@'127.0.0.1'; \
         CREATE DEFINER = t_frz_mallory@'127.0.0.1' TRIGGER t_frz_back BEFORE UPDATE \
           ON t_frz_locks FOR EACH ROW \
           SET NEW.expires_at = OLD.expires_at - INTERVAL 300000 MICROSECOND",
    );
    drop(server);
    let status = wait_exit(&mut held, T);
    wait_for_file(&dir.file("w.in"), T);
    let waited = wait_exit(&mut waiter, T);
    let server = MyServer::shared().lock().unwrap();
    server.sql("DROP TRIGGER t_frz_back; DROP USER t_frz_mallory@'127.0.0.1'");
    drop(server);
    let mut err = String::new();
    if let Some(mut pipe) = held.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut err);
    }
    assert!(!dir.file("overlap").exists(), "two holders at once: {err}");
    assert_eq!(status.code(), Some(79), "{err}");
    assert!(err.contains("lost the lock"), "{err}");
    assert!(waited.success());
    assert!(token(&dir, "w") > token(&dir, "h"));
}
