//! The MySQL backend's own mechanism, through the real binary on a real MariaDB: the URL,
//! passwords, TLS, leases judged by the server's clock, tokens that survive a crash, a holder
//! whose session is killed from outside, waiting; who may own dlock's objects in owners.rs.
//!
//! Beside them, what the rest of the suite uses of MySQL, in every build: its server (server.rs,
//! MariaDB) and its description and targets (store.rs).

// Its tests are built with the mysql feature only; without it, what they share goes unused.
#![cfg_attr(not(feature = "mysql"), allow(dead_code, unused_imports))]

// What the rest of the suite uses of this store, in every build.
pub mod server;
pub mod store;

#[cfg(feature = "mysql")]
mod owners;

use std::process::{Child, Command};
use std::time::Duration;

use crate::mysql::server::{MyServer, DATABASE, PASSWORD};
use crate::support::sql_server::Pausable;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn mysql_dlock(url: &str, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "mysql", "--url", url]).args(args);
    cmd
}

/// `dlock run NAME -- sh -c 'echo $DLOCK_TOKEN > DIR/TAG.in; <until DIR/TAG.go>'`, returned once
/// the command runs.
fn holder(url: &str, dir: &LockDir, flags: &[&str], name: &str, tag: &str) -> Child {
    let child = start(url, dir, flags, name, tag);
    wait_for_file(&dir.file(&format!("{tag}.in")), T);
    child
}

/// As `holder`, without waiting for the command to run.
fn start(url: &str, dir: &LockDir, flags: &[&str], name: &str, tag: &str) -> Child {
    let script = format!(
        "echo $DLOCK_TOKEN > '{d}/{tag}.in'; i=0; while [ ! -e '{d}/{tag}.go' ] && [ $i -lt 1200 ]; \
         do sleep 0.05; i=$((i+1)); done",
        d = dir.path().display()
    );
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    mysql_dlock(url, &args).spawn().expect("start a holder")
}

fn let_go(dir: &LockDir, tag: &str) {
    std::fs::write(dir.file(&format!("{tag}.go")), "").unwrap();
}

fn token(dir: &LockDir, tag: &str) -> u64 {
    read_pid(&dir.file(&format!("{tag}.in"))) as u64
}

#[cfg(feature = "mysql")]
#[test]
fn urls_that_cannot_be_read_are_usage_errors_that_never_show_the_password() {
    for url in [
        "mysql://u:SECRET@127.0.0.1",
        "mysql://u:SECRET@127.0.0.1:0/db",
        "mysql://u:SECRET@127.0.0.1/db?ssl-mode=SOMETIMES",
        "mysql://u:SECRET@127.0.0.1/db?prefix=Robert');DROP",
        "mysql://u:SECRET@127.0.0.1/db?password=SECRET",
    ] {
        let out = output(mysql_dlock(url, &["run", "m", "--", "true"]));
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with("dlock: ") && !err.contains("SECRET"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[cfg(feature = "mysql")]
#[test]
fn passwords_never_show_in_messages() {
    let port = MyServer::shared().lock().unwrap().port();
    let (_held, refused) = refusing_port();
    for url in [
        format!("mysql://root:wrong-SECRET@127.0.0.1:{port}/{DATABASE}"),
        format!("mysql://root:{PASSWORD}@127.0.0.1:{refused}/{DATABASE}"),
    ] {
        let out = output(mysql_dlock(&url, &["run", "p", "--", "true"]));
        assert_eq!(code(&out), 69, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains("SECRET") && !err.contains(PASSWORD), "{err}");
        assert!(
            err.contains("mysql at mysql://root:***@127.0.0.1:"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[cfg(feature = "mysql")]
#[test]
fn tls_verify_identity_works_with_the_test_ca_and_fails_69_without_it() {
    let dir = LockDir::new();
    let files = crate::support::tls::make_tls_files(&dir);
    let server = MyServer::start_tls(&files.cert, &files.key);
    server.sql("ALTER USER root@'127.0.0.1' REQUIRE SSL");
    let ca = files.ca.display().to_string();
    let port = server.port();
    let base = format!("mysql://root:{PASSWORD}@127.0.0.1:{port}/{DATABASE}");
    for mode in ["VERIFY_IDENTITY", "REQUIRED"] {
        let url = format!("{base}?ssl-mode={mode}&ssl-ca={ca}");
        let out = output(mysql_dlock(
            &url,
            &["run", "t", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
        ));
        assert_eq!(code(&out), 0, "{mode}: {}", stderr(&out));
    }
    // Without TLS the server refuses root; with TLS but without the test CA, dlock refuses the
    // server.
    let out = output(mysql_dlock(&base, &["run", "t", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let other = LockDir::new();
    let stranger = crate::support::tls::make_tls_files(&other);
    let url = format!(
        "{base}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        stranger.ca.display()
    );
    let out = output(mysql_dlock(&url, &["run", "t", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("TLS") && !err.contains(PASSWORD), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// The server's clock is an hour behind this machine's: a lease it grants runs out an hour before
/// now by the client's clock, and still the lock is held, shown and busy until the holder ends.
#[cfg(feature = "mysql")]
#[test]
fn leases_are_judged_by_the_servers_clock() {
    let server = MyServer::start_with_clock("-3600");
    let url = server.url_with("");
    let dir = LockDir::new();
    let mut held = holder(&url, &dir, &["--ttl", "5s"], "c", "h");
    // Past a renewal, so that a renewal too is judged by the server.
    std::thread::sleep(Duration::from_secs(2));
    let out = output(mysql_dlock(&url, &["run", "-n", "c", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(mysql_dlock(&url, &["status", "--json", "c"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let until =
        humantime::parse_rfc3339(json["holders"][0]["expires_at"].as_str().unwrap()).unwrap();
    let behind = std::time::SystemTime::now()
        .duration_since(until)
        .expect("the lease ends in the past by this machine's clock");
    assert!(behind > Duration::from_secs(3000), "{json}");
    let_go(&dir, "h");
    assert!(wait_exit(&mut held, T).success());
    let out = output(mysql_dlock(&url, &["run", "-n", "c", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[cfg(feature = "mysql")]
#[test]
fn tokens_survive_a_server_crash() {
    let mut server = MyServer::start();
    let url = server.url_with("");
    for expected in 1..=3u64 {
        let out = output(mysql_dlock(
            &url,
            &["run", "k", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
        ));
        assert_eq!(
            stdout(&out).trim(),
            expected.to_string(),
            "{}",
            stderr(&out)
        );
    }
    server.restart();
    let out = output(mysql_dlock(
        &url,
        &["run", "k", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(stdout(&out).trim(), "4", "{}", stderr(&out));
}

/// Another client kills the holder's connection (`KILL`): its session's lock keys go, but the
/// lease stands; the holder reconnects at its next renewal, keeps the lock to the end, and a
/// waiter gets it after it.
#[cfg(feature = "mysql")]
#[test]
fn a_holder_whose_connection_is_killed_keeps_its_lock() {
    // A server of its own: every dlock connection on it is killed, and on the shared one that
    // would cut other tests' connections too.
    let server = MyServer::start();
    let url = server.url_with("prefix=t_kill_");
    let dir = LockDir::new();
    let mut held = holder(&url, &dir, &["--ttl", "3s"], "k", "h");
    let first = token(&dir, "h");
    let mut waiter = mysql_dlock(&url, &["run", "k", "--", "true"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ids = server.sql(
        "SELECT id FROM information_schema.processlist WHERE db = 'dlock' AND host LIKE '127.0.0.1:%'",
    );
    assert!(!ids.is_empty(), "dlock's connections");
    for id in ids.lines() {
        let _ = server
            .client(DATABASE)
            .args(["-e", &format!("KILL {id}")])
            .output();
    }
    // Two leases: the holder renewed on a new connection, and nobody else got in meanwhile.
    std::thread::sleep(Duration::from_secs(6));
    assert!(held.try_wait().unwrap().is_none(), "the holder ended");
    assert!(waiter.try_wait().unwrap().is_none(), "the waiter got in");
    let out = output(mysql_dlock(&url, &["status", "--json", "k"]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["holders"][0]["token"], first, "{json}");
    let_go(&dir, "h");
    assert!(wait_exit(&mut held, T).success());
    assert!(wait_exit(&mut waiter, T).success());
    // A cut plain connection is said as such, not as a TLS failure.
    let mut said = String::new();
    std::io::Read::read_to_string(&mut waiter.stderr.take().unwrap(), &mut said).unwrap();
    assert!(!said.contains("TLS"), "{said}");
}

/// Tables an older dlock made, without the `--min-hold` columns (and a row it wrote): the first
/// call adds the columns (a user without ALTER is told to ask for it), the old row still reads,
/// and a min-hold is kept on them.
#[cfg(feature = "mysql")]
#[test]
fn tables_an_older_dlock_made_gain_the_min_hold_columns() {
    let server = MyServer::shared().lock().unwrap_or_else(|p| p.into_inner());
    server.sql(
        "DROP TABLE IF EXISTS t_old_locks; \
         CREATE TABLE t_old_locks (name VARBINARY(512) NOT NULL, owner VARBINARY(64) NOT NULL, \
           mode VARBINARY(32) NOT NULL, token BIGINT NOT NULL, since DATETIME(6) NOT NULL, \
           expires_at DATETIME(6) NOT NULL, pid BIGINT NOT NULL, host VARBINARY(255) NOT NULL, \
           message VARBINARY(1024) NULL, PRIMARY KEY (name, owner)) ENGINE = InnoDB; \
         INSERT INTO t_old_locks VALUES ('old', 'o1', 'exclusive', 7, UTC_TIMESTAMP(6), \
           UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 1, 'elsewhere', NULL); \
         DROP USER IF EXISTS upgrader@'127.0.0.1'; \
         CREATE USER upgrader@'127.0.0.1' IDENTIFIED BY 'up-SECRET'; \
         GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, CREATE, CREATE ROUTINE ON dlock.* \
           TO upgrader@'127.0.0.1'",
    );
    let port = server.port();
    drop(server);
    // Adding the columns needs a right the first run on new tables does not: the message says so.
    let upgrader = format!("mysql://upgrader:up-SECRET@127.0.0.1:{port}/{DATABASE}?prefix=t_old_");
    let out = output(mysql_dlock(&upgrader, &["run", "old", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("GRANT CREATE, CREATE ROUTINE, ALTER ON `dlock`.* TO 'upgrader'@"),
        "{}",
        stderr(&out)
    );
    let url = MyServer::shared_url("t_old_");
    let out = output(mysql_dlock(&url, &["status", "--json", "old"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["holders"][0]["token"], 7, "{json}");
    assert!(json["holders"][0]["kept_until"].is_null(), "{json}");

    let out = output(mysql_dlock(
        &url,
        &["run", "--min-hold", "1h", "new", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(mysql_dlock(&url, &["run", "-n", "new", "--", "true"]));
    assert_eq!(code(&out), 75, "kept by --min-hold: {}", stderr(&out));
    let out = output(mysql_dlock(&url, &["status", "new"]));
    assert!(
        stdout(&out).contains("by --min-hold 1h; its command ended"),
        "{}",
        stdout(&out)
    );
}

/// A waiter behind a lock kept by `--min-hold` after its command ended (its lock key free) sleeps
/// until the end the server reports, rather than asking again and again: a handful of statements
/// for a wait of seconds, counted on a server of its own.
#[cfg(feature = "mysql")]
#[test]
fn a_waiter_sleeps_through_a_min_hold_rather_than_polling() {
    let server = MyServer::start();
    let url = server.url_with("");
    let out = output(mysql_dlock(
        &url,
        &["run", "--min-hold", "3", "w", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let statements = || -> u64 {
        server
            .sql("SELECT SUM(VARIABLE_VALUE) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('COM_CALL_PROCEDURE', 'COM_SELECT', 'COM_STMT_EXECUTE')")
            .parse()
            .unwrap()
    };
    let before = statements();
    let out = output(mysql_dlock(&url, &["run", "-w", "60", "w", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The waiter's statements, and this test's own two counts.
    let sent = statements() - before;
    assert!(sent < 40, "{sent} statements for one wait");
}

/// A queue table an older dlock made (before the waiters' pid, host, since and message were kept)
/// gains those columns on first use by this dlock, and `status` then shows who waits.
#[cfg(feature = "mysql")]
#[test]
fn a_queue_table_from_an_older_dlock_gains_who_waits() {
    let url = MyServer::shared_url("t_oldq_");
    let out = output(mysql_dlock(&url, &["run", "q", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    MyServer::shared()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .sql(
            "ALTER TABLE t_oldq_queue DROP COLUMN since, DROP COLUMN pid, DROP COLUMN host, \
             DROP COLUMN message",
        );
    let dir = LockDir::new();
    let mut held = holder(&url, &dir, &[], "q", "h");
    let mut waiter = watched::Watched::start(mysql_dlock(
        &url,
        &["-v", "run", "--message", "next", "q", "--", "true"],
    ));
    waiter.wait_for("waiting for lock", T);
    let out = output(mysql_dlock(&url, &["status", "--json", "q"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let waiters = json["waiters"].as_array().expect("a list of waiters");
    assert_eq!(waiters.len(), 1, "{json}");
    assert_eq!(waiters[0]["pid"], waiter.child.id(), "{json}");
    assert_eq!(waiters[0]["message"], "next", "{json}");
    assert!(
        waiters[0]["host"].is_string() && waiters[0]["since"].is_string(),
        "{json}"
    );
    let_go(&dir, "h");
    assert!(wait_exit(&mut held, T).success());
    assert_eq!(waiter.finish(T).0, 0);

    // A waiter as an older dlock writes it: its mode, with no pid, host or time to show.
    MyServer::shared()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .sql(
            "INSERT INTO t_oldq_queue (name, owner, mode, alive_until) \
             VALUES ('old', 'ab12', 'shared', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
        );
    // Not held (1), with a waiter in line.
    let out = output(mysql_dlock(&url, &["status", "--json", "old"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let old = &json["waiters"][0];
    assert_eq!(old["mode"], "shared", "{json}");
    assert_eq!(old["owner"], "ab12", "{json}");
    assert!(
        old["pid"].is_null() && old.get("unreadable").is_none(),
        "{json}"
    );
}

/// Under `-q` nobody sees who holds the lock waited for, so the waiter never asks the server (a
/// statement per wait and per re-check for nothing); without `-q` it does, for the waiting line.
#[cfg(feature = "mysql")]
#[test]
fn a_quiet_waiter_never_reads_who_holds_the_lock() {
    let server = MyServer::start();
    server.log_statements();
    let url = server.url_with("prefix=t_quiet_");
    let dir = LockDir::new();
    // The holders' query (holders.sql), not counting this count, which the log has too.
    let holder_reads = || -> u64 {
        server
            .sql(
                "SELECT count(*) FROM mysql.general_log \
                 WHERE argument LIKE '%FROM t\\_quiet\\_locks%ORDER BY name, token%' \
                   AND argument NOT LIKE '%general_log%'",
            )
            .parse()
            .unwrap()
    };
    // The waiter behind a holder, let in once it is in line.
    assert_only_loud_waiters_read_holders(holder_reads, |flags, tag| {
        let mut h = holder(&url, &dir, &[], "q", &format!("{tag}-h"));
        let mut w = start(&url, &dir, flags, "q", tag);
        wait_until("the waiter in line", T, || {
            server.sql("SELECT count(*) FROM t_quiet_queue") == "1"
        });
        // Past the wait its attempt makes on the holder's key (a holder gone within it would let
        // the waiter in with no line to show): waiting on its doorbell, a second session.
        wait_until("the waiter on its doorbell", T, || {
            server.dlock_sessions() == 3
        });
        let_go(&dir, &format!("{tag}-h"));
        wait_for_file(&dir.file(&format!("{tag}.in")), T);
        let_go(&dir, tag);
        assert!(wait_exit(&mut h, T).success());
        assert!(wait_exit(&mut w, T).success());
    });
}

/// A release takes the name's counter row lock, as every attempt does, so an attempt never sees a
/// holder in one of its statements and not in the next (it would find nobody to wait for, and sit
/// until its re-check, a third of its ttl: seen as a 5 s stall once in a few thousand contended
/// runs). Shown here with another session holding that row lock: the release waits for it, the
/// holder's row still there, and goes through once that session commits.
#[cfg(feature = "mysql")]
#[test]
fn a_release_waits_for_the_names_other_changes() {
    use std::io::{BufRead, BufReader, Write};
    let url = MyServer::shared_url("t_serial_");
    let dir = LockDir::new();
    let mut held = holder(&url, &dir, &["--ttl", "30s"], "s", "h");
    let server = || MyServer::shared().lock().unwrap_or_else(|p| p.into_inner());
    let mut session = server()
        .client(DATABASE)
        .arg("--unbuffered")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start mariadb");
    let mut to_session = session.stdin.take().unwrap();
    let mut from_session = BufReader::new(session.stdout.take().unwrap());
    writeln!(
        to_session,
        "START TRANSACTION; SELECT last_token FROM t_serial_tokens WHERE name = 's' FOR UPDATE; \
         SELECT 'locked';"
    )
    .unwrap();
    let mut line = String::new();
    while line.trim() != "locked" {
        line.clear();
        assert!(
            from_session.read_line(&mut line).unwrap() > 0,
            "mariadb ended"
        );
    }
    let_go(&dir, "h");
    wait_until("the release waiting for the counter row", T, || {
        // Not InnoDB's lock tables: they may miss a wait made while the statement is planned.
        server().sql(
            "SELECT count(*) FROM information_schema.processlist \
              WHERE id <> CONNECTION_ID() AND info LIKE '%FROM t_serial_tokens %FOR UPDATE'",
        ) == "1"
    });
    assert_eq!(
        server().sql("SELECT count(*) FROM t_serial_locks WHERE name = 's'"),
        "1",
        "the holder's row went while another change of the name was under way"
    );
    assert!(
        held.try_wait().unwrap().is_none(),
        "dlock ended before its release"
    );
    writeln!(to_session, "COMMIT;").unwrap();
    drop(to_session);
    assert!(wait_exit(&mut held, T).success());
    assert!(session.wait().unwrap().success());
    assert_eq!(
        server().sql("SELECT count(*) FROM t_serial_locks WHERE name = 's'"),
        "0"
    );
}

/// A waiter past its first slice blocks on a session of its own (its doorbell) until its next
/// re-check, here 20 s away; a signal still ends it at once, and it leaves nothing: no place in
/// line, no session (its `GET_LOCK` ended by `KILL QUERY`), no statement while it waited. The
/// first slice went with its attempt, in the same call: one wait (the doorbell's) reached the
/// server, not a wait on the first connection and another on the doorbell.
#[cfg(feature = "mysql")]
#[test]
fn a_waiter_on_its_doorbell_sends_nothing_and_a_signal_ends_it_at_once() {
    let server = MyServer::start();
    server.log_statements();
    let url = server.url_with("prefix=t_bell_");
    let dir = LockDir::new();
    let mut held = holder(&url, &dir, &[], "b", "h");
    let mut waiter = start(&url, &dir, &["--ttl", "60s"], "b", "w");
    wait_until("the waiter on its doorbell", T, || {
        server.dlock_sessions() == 3
    });
    let before = server.dlock_statements();
    // Its doorbell's wait stands: nothing more reaches the server while the holder holds.
    wait_until("the doorbell's GET_LOCK under way for a second", T, || {
        server.sql(
            "SELECT count(*) FROM information_schema.processlist \
             WHERE host LIKE '127.0.0.1:%' AND state = 'User lock' AND time >= 1",
        ) == "1"
    });
    assert_eq!(
        server.dlock_statements(),
        before,
        "statements while the waiter waited"
    );
    // The doorbell's wait alone: the first slice went with the attempt.
    assert_eq!(server.dlock_statements_like("%IF(GET\\_LOCK(%"), 1);
    let asked = std::time::Instant::now();
    signal(waiter.id(), libc::SIGTERM);
    let status = wait_exit(&mut waiter, T);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the waiter took {:?} to end: it waited out its GET_LOCK",
        asked.elapsed()
    );
    assert!(!dir.file("w.in").exists(), "the waiter's command ran");
    assert_eq!(server.sql("SELECT count(*) FROM t_bell_queue"), "0");
    wait_until("only the holder's session left", T, || {
        server.dlock_sessions() == 1
    });
    let_go(&dir, "h");
    assert!(wait_exit(&mut held, T).success());
}

/// A holder row whose lock key no session holds (written by another client here; in life, a
/// holder whose session was cut): the attempt's own wait finds the key free at once, tries again
/// and says so (`found_free`), and the waiter sleeps until that row's lease ends instead of
/// waiting on the free key itself. No wait of its own reaches the server, and it gets in.
#[cfg(feature = "mysql")]
#[test]
fn a_waiter_behind_a_holder_whose_key_is_free_sleeps_until_its_lease_ends() {
    let server = MyServer::start();
    let url = server.url_with("prefix=t_keyfree_");
    // The tables, made by a first run.
    let out = output(mysql_dlock(&url, &["run", "f", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    server.sql(
        "INSERT INTO t_keyfree_locks (name, owner, mode, token, since, expires_at, pid, host) \
         VALUES ('f', 'ab', 'exclusive', 7, UTC_TIMESTAMP(6), \
                 UTC_TIMESTAMP(6) + INTERVAL 2 SECOND, 1, 'elsewhere')",
    );
    server.log_statements();
    let out = output(mysql_dlock(&url, &["run", "-w", "30", "f", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        server.dlock_statements_like("%IF(GET\\_LOCK(%"),
        0,
        "waits of the waiter's own on a key found free"
    );
}
