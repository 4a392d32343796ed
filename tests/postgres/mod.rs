//! The PostgreSQL backend's own mechanism, through the real binary on a real server: exclusion,
//! shared and limit holders, tokens that survive a crash, waiting on notifications in arrival
//! order, lost leases, hostile rows; credentials and rights in credentials.rs.
//!
//! Beside them, what the rest of the suite uses of PostgreSQL, in every build: its server
//! (server.rs, and pgbouncer.rs in front of it) and its description and targets (store.rs).

// Its tests are built with the postgres feature only; without it, what they share goes unused.
#![cfg_attr(not(feature = "postgres"), allow(dead_code, unused_imports))]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// What the rest of the suite uses of this store, in every build.
pub mod pgbouncer;
pub mod server;
pub mod store;

#[cfg(feature = "postgres")]
mod credentials;
#[cfg(feature = "postgres")]
mod late;
#[cfg(feature = "postgres")]
mod owners;
#[cfg(feature = "postgres")]
mod pooler;
#[cfg(feature = "postgres")]
mod tls;

use crate::postgres::server::{PgServer, PASSWORD};
use crate::support::stderr::Stderr;
use crate::support::sql_server::Pausable;
use crate::support::*;

pub(crate) const T: Duration = Duration::from_secs(30);

/// dlock on one URL, with a scratch directory for markers.
pub(crate) struct Pg {
    url: String,
    pub(crate) dir: LockDir,
}

impl Pg {
    /// On the shared server, with tables of the test's own (`prefix`).
    pub(crate) fn shared(prefix: &str) -> Pg {
        Pg {
            url: PgServer::shared_url(prefix),
            dir: LockDir::new(),
        }
    }

    /// On `url` as given (another role's credentials).
    pub(crate) fn at(url: String) -> Pg {
        Pg {
            url,
            dir: LockDir::new(),
        }
    }

    fn on(server: &PgServer, query: &str) -> Pg {
        Pg {
            url: server.url_with(query),
            dir: LockDir::new(),
        }
    }

    pub(crate) fn dlock(&self, args: &[&str]) -> Command {
        let mut cmd = dlock();
        cmd.args(["--backend", "postgres", "--url", &self.url])
            .args(args);
        cmd
    }

    /// `dlock run FLAGS NAME -- sh -c 'echo $DLOCK_TOKEN > TAG.in; <hold until TAG.go>'` in the
    /// background, once its command runs.
    pub(crate) fn holder(&self, flags: &[&str], name: &str, tag: &str) -> (Child, Stderr) {
        let (mut child, err) = self.start(flags, name, tag);
        wait_for_file(&self.dir.file(&format!("{tag}.in")), T);
        let _ = &mut child;
        (child, err)
    }

    /// As `holder`, without waiting for the command to run.
    pub(crate) fn start(&self, flags: &[&str], name: &str, tag: &str) -> (Child, Stderr) {
        let script = format!(
            "echo $DLOCK_TOKEN > {tag}.in; i=0; while [ ! -e {tag}.go ] && [ $i -lt 600 ]; do \
             sleep 0.05; i=$((i+1)); done"
        );
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
        let mut child = self
            .dlock(&args)
            .current_dir(self.dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = Stderr::of(&mut child);
        (child, err)
    }

    pub(crate) fn let_go(&self, tag: &str) {
        std::fs::write(self.dir.file(&format!("{tag}.go")), "").unwrap();
    }

    fn runs(&self, tag: &str) -> bool {
        self.dir.file(&format!("{tag}.in")).exists()
    }

    pub(crate) fn token(&self, tag: &str) -> u64 {
        read_pid(&self.dir.file(&format!("{tag}.in"))) as u64
    }

    fn status_json(&self, name: &str) -> serde_json::Value {
        let out = output(self.dlock(&["status", "--json", name]));
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
    }
}

/// Another client of the shared server in an open transaction, session `app`: it has run
/// `sql` (taken a row or table lock) and sleeps, holding it, until `cut_off`.
struct Session {
    app: String,
    psql: Child,
}

impl Session {
    fn holding(app: &str, sql: &str) -> Session {
        let server = PgServer::use_shared();
        let psql = server.psql_in_background(app, &format!("{sql}; SELECT pg_sleep(60)"));
        wait_until(&format!("{app} to hold its lock"), T, || {
            server.psql(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' \
                 AND query LIKE '%pg_sleep%' AND state = 'active'"
            )) == "1"
        });
        Session {
            app: app.to_owned(),
            psql,
        }
    }

    /// Ends the session (its transaction rolls back, its locks go).
    fn cut_off(mut self) {
        PgServer::use_shared().psql(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = '{}'",
            self.app
        ));
        let _ = wait_exit(&mut self.psql, T);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn exclusive_lock_excludes_others_and_status_shows_the_holder() {
    let pg = Pg::shared("t_excl_");
    let (mut holder, _) = pg.holder(&[], "deploy", "h");
    let out = output(pg.dlock(&["run", "--no-wait", "deploy", "--", "touch", "ran"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("busy"), "{}", stderr(&out));
    assert!(!pg.dir.file("ran").exists());

    let json = pg.status_json("deploy");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(holders[0]["mode"], "exclusive");
    assert_eq!(holders[0]["pid"], holder.id());
    assert_eq!(holders[0]["token"], pg.token("h"));
    assert!(holders[0]["since"].is_string(), "{json}");
    assert!(holders[0]["host"].is_string(), "{json}");
    assert_eq!(holders[0]["owner"].as_str().unwrap().len(), 32, "{json}");
    let list = output(pg.dlock(&["list", "--json"]));
    assert!(stdout(&list).contains("deploy"), "{}", stdout(&list));

    pg.let_go("h");
    assert!(wait_exit(&mut holder, T).success());
    let out = output(pg.dlock(&["status", "deploy"]));
    assert_eq!(code(&out), 1, "free again: {}", stdout(&out));
    // The refused attempt left nothing in line.
    let out = output(pg.dlock(&["run", "--no-wait", "deploy", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[cfg(feature = "postgres")]
#[test]
fn tokens_increase_per_name() {
    let pg = Pg::shared("t_tokens_");
    let mut seen = vec![];
    for _ in 0..3 {
        let out = output(pg.dlock(&["run", "tok", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        seen.push(stdout(&out).trim().parse::<u64>().unwrap());
    }
    assert_eq!(seen, [1, 2, 3]);
}

#[cfg(feature = "postgres")]
#[test]
fn shared_holders_run_together_and_a_limit_counts_seats() {
    let pg = Pg::shared("t_shared_");
    let (mut r1, _) = pg.holder(&["--shared"], "rw", "r1");
    let (mut r2, _) = pg.holder(&["--shared"], "rw", "r2");
    let out = output(pg.dlock(&["run", "--no-wait", "rw", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "exclusive waits for readers: {}",
        stderr(&out)
    );
    let (mut s1, _) = pg.holder(&["--limit", "2"], "seats", "s1");
    let (mut s2, _) = pg.holder(&["--limit", "2"], "seats", "s2");
    let out = output(pg.dlock(&["run", "--no-wait", "--limit", "2", "seats", "--", "true"]));
    assert_eq!(code(&out), 75, "a third seat: {}", stderr(&out));
    for (tag, child) in [
        ("r1", &mut r1),
        ("r2", &mut r2),
        ("s1", &mut s1),
        ("s2", &mut s2),
    ] {
        pg.let_go(tag);
        assert!(wait_exit(child, T).success());
    }
}

#[cfg(feature = "postgres")]
#[test]
fn tokens_survive_a_server_crash() {
    let mut server = PgServer::start();
    let pg = Pg::on(&server, "");
    let token = |pg: &Pg| {
        let out = output(pg.dlock(&["run", "crash", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().parse::<u64>().unwrap()
    };
    assert_eq!((token(&pg), token(&pg)), (1, 2));
    // An immediate shutdown: no checkpoint, the server recovers from its log at the next start.
    server.restart();
    assert_eq!(token(&pg), 3);
}

/// Lines the server logged for connections named `app`.
fn statements_by(server_log: &str, app: &str) -> usize {
    server_log
        .lines()
        .filter(|l| l.starts_with(&format!("{app}|")) && l.contains("statement:"))
        .count()
}

#[cfg(feature = "postgres")]
#[test]
fn waiters_start_in_arrival_order_when_told_and_send_nothing_while_idle() {
    let server = PgServer::start();
    let pg = Pg::on(&server, "prefix=t_fifo_");
    let waiters = Pg {
        url: server.url_with("prefix=t_fifo_&application_name=dlockwaiter"),
        dir: LockDir::new(),
    };
    let (mut h, _) = pg.holder(&[], "q", "h");
    let queued = |n: &str| server.psql("SELECT count(*) FROM t_fifo_queue") == n;
    let (mut w1, _) = waiters.start(&["--ttl", "30s"], "q", "w1");
    wait_until("w1 in line", T, || queued("1"));
    let (mut w2, _) = waiters.start(&["--ttl", "30s"], "q", "w2");
    wait_until("w2 in line", T, || queued("2"));

    // Idle: the waiters' next re-check is a third of their ttl away (10s); in this window they
    // must send nothing at all.
    let before = statements_by(&server.log(), "dlockwaiter");
    assert!(before > 0, "the log names the waiters: {}", server.log());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        statements_by(&server.log(), "dlockwaiter"),
        before,
        "no statement while idle"
    );

    // The release tells the first waiter, which starts long before any re-check would.
    let released = Instant::now();
    pg.let_go("h");
    wait_for_file(&waiters.dir.file("w1.in"), Duration::from_secs(5));
    let took = released.elapsed();
    assert!(took < Duration::from_secs(3), "woken, not polled: {took:?}");
    assert!(wait_exit(&mut h, T).success());
    assert!(!waiters.runs("w2"), "w2 came second");
    waiters.let_go("w1");
    wait_for_file(&waiters.dir.file("w2.in"), Duration::from_secs(5));
    assert!(waiters.token("w2") > waiters.token("w1"));
    waiters.let_go("w2");
    assert!(wait_exit(&mut w1, T).success());
    assert!(wait_exit(&mut w2, T).success());
    assert_eq!(server.psql("SELECT count(*) FROM t_fifo_queue"), "0");
}

#[cfg(feature = "postgres")]
#[test]
fn a_deleted_row_is_a_lost_lease_and_the_command_is_killed_79() {
    let pg = Pg::shared("t_lost_");
    let (mut h, err) = pg.holder(&["--ttl", "1s"], "lost", "h");
    PgServer::use_shared().psql("DELETE FROM t_lost_locks WHERE name = 'lost'");
    let status = wait_exit(&mut h, T);
    assert_eq!(status.code(), Some(79), "{}", err.text());
    assert!(err.text().contains("no longer ours"), "{}", err.text());
}

#[cfg(feature = "postgres")]
#[test]
fn release_force_breaks_the_lock_and_the_holder_exits_79() {
    let pg = Pg::shared("t_force_");
    let (mut h, err) = pg.holder(&["--ttl", "1s"], "stuck", "h");
    let out = output(pg.dlock(&["release", "--force", "stuck"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(pg.dlock(&["run", "--no-wait", "stuck", "--", "true"]));
    assert_eq!(code(&out), 0, "free after the break: {}", stderr(&out));
    assert_eq!(wait_exit(&mut h, T).code(), Some(79), "{}", err.text());
}

#[cfg(feature = "postgres")]
#[test]
fn hostile_rows_are_shown_unreadable_and_still_hold() {
    let pg = Pg::shared("t_hostile_");
    assert_eq!(code(&output(pg.dlock(&["run", "x", "--", "true"]))), 0);
    PgServer::use_shared().psql(
        "INSERT INTO t_hostile_locks (name, owner, mode, token, since, expires_at, pid, host) \
         VALUES ('evil', E'own\\x1b[2J', 'bogus', -5, now(), \
         now() + interval '1 hour', 99999999999, E'h\\x1bost')",
    );
    let json = pg.status_json("evil");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert!(holders[0]["unreadable"].is_string(), "{json}");
    let out = output(pg.dlock(&["status", "evil"]));
    assert!(!stdout(&out).contains('\u{1b}'), "{}", stdout(&out));
    let out = output(pg.dlock(&["run", "--no-wait", "evil", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "a row it cannot read still holds: {}",
        stderr(&out)
    );
    let out = output(pg.dlock(&["list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stdout(&out).contains('\u{1b}'));
}

/// While dlock waits for a later name, the lock it already holds renews on a connection of its
/// own: another client holding the later name's counter row stalls each attempt of the wait (up
/// to the connect timeout), and the held lock's 1 s lease must not queue behind it.
#[cfg(feature = "postgres")]
#[test]
fn a_held_lock_stays_held_while_the_wait_for_the_next_is_stalled_at_the_server() {
    let pg = Pg::shared("t_stall_");
    let (mut b, _) = pg.holder(&[], "b", "hb");
    let ran = pg.dir.file("both");
    let mut both = pg
        .dlock(&["run", "--ttl", "1s", "a", "b", "--", "touch"])
        .arg(&ran)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = Stderr::of(&mut both);
    wait_until("the waiter to hold a", T, || {
        code(&output(pg.dlock(&["status", "a"]))) == 0
    });
    let server = PgServer::use_shared();
    let mut stall = server.psql_in_background(
        "t-stall",
        "SELECT 1 FROM t_stall_tokens WHERE name = 'b' FOR UPDATE; SELECT pg_sleep(4)",
    );
    wait_until("the counter row of b to be held", T, || {
        server.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 't-stall' \
             AND query LIKE '%pg_sleep%' AND state = 'active'",
        ) == "1"
    });
    drop(server);
    // Three of a's leases, had they not been renewed.
    std::thread::sleep(Duration::from_secs(3));
    let out = output(pg.dlock(&["run", "-n", "a", "--", "true"]));
    assert_eq!(
        code(&out),
        75,
        "a was let go while the wait for b was stalled: {} / {}",
        stderr(&out),
        err.text()
    );
    let _ = wait_exit(&mut stall, T);
    pg.let_go("hb");
    assert!(wait_exit(&mut b, T).success());
    assert!(wait_exit(&mut both, T).success(), "{}", err.text());
    assert!(ran.exists());
}

/// Under `-q` nobody sees who holds the lock waited for, so the waiter never asks the server (a
/// statement per wait and per wake-up for nothing); without `-q` it does, for the waiting line.
#[cfg(feature = "postgres")]
#[test]
fn a_quiet_waiter_never_reads_who_holds_the_lock() {
    let server = PgServer::start();
    let pg = Pg::on(&server, "prefix=t_quiet_");
    let holder_reads = || {
        let log = server.log();
        log.lines()
            .filter(|l| l.contains("The live holders"))
            .count() as u64
    };
    // The waiter behind a holder, let in once it is in line.
    assert_only_loud_waiters_read_holders(holder_reads, |flags, tag| {
        let (mut h, _) = pg.holder(&[], "q", &format!("{tag}-h"));
        let (mut w, _) = pg.start(flags, "q", tag);
        wait_until("the waiter in line", T, || {
            server.psql("SELECT count(*) FROM t_quiet_queue") == "1"
        });
        pg.let_go(&format!("{tag}-h"));
        wait_for_file(&pg.dir.file(&format!("{tag}.in")), T);
        pg.let_go(tag);
        assert!(wait_exit(&mut h, T).success());
        assert!(wait_exit(&mut w, T).success());
    });
}

/// A run's first attempt takes a free lock in plain SQL (`acquire_free.sql`). Runs that all find
/// it free at the same moment are serialised by the name's counter row, so one gets in: here
/// another client holds that row while three runs make their first attempt, then is cut off;
/// exactly one runs, and the others, with `-n`, find the lock busy.
#[cfg(feature = "postgres")]
#[test]
fn first_attempts_that_all_find_the_lock_free_let_one_in() {
    let pg = Pg::shared("t_free_");
    // The name's counter row, made by a first run.
    assert_eq!(code(&output(pg.dlock(&["run", "f", "--", "true"]))), 0);
    let blocked = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND query LIKE '%t_free_tokens%'";
    let stall = Session::holding(
        "t-free",
        "SELECT 1 FROM t_free_tokens WHERE name = 'f' FOR UPDATE",
    );
    let mut runs: Vec<(Child, Stderr)> = (0..3)
        .map(|i| pg.start(&["-n"], "f", &format!("r{i}")))
        .collect();
    wait_until("the three first attempts to wait for the row", T, || {
        PgServer::use_shared().psql(blocked) == "3"
    });
    stall.cut_off();
    wait_until("each run to be inside or turned away", T, || {
        runs.iter_mut()
            .enumerate()
            .all(|(i, (c, _))| pg.runs(&format!("r{i}")) || c.try_wait().unwrap().is_some())
    });
    let inside: Vec<usize> = (0..3).filter(|i| pg.runs(&format!("r{i}"))).collect();
    assert_eq!(inside.len(), 1, "runs inside: {inside:?}");
    pg.let_go(&format!("r{}", inside[0]));
    for (mut c, err) in runs {
        let status = wait_exit(&mut c, T);
        assert!(matches!(status.code(), Some(0 | 75)), "{}", err.text());
    }
}

/// A release when nobody waits (`release_free.sql`) is one of the name's changes like the others:
/// it waits for the name's counter row, so a waiter taking its place in line meanwhile is either
/// seen (and woken by release_v1) or sees the holder gone. Here another client holds that row:
/// the release waits, with the holder's row still there, and goes through once the row is free.
#[cfg(feature = "postgres")]
#[test]
fn a_release_waits_for_the_names_other_changes() {
    let pg = Pg::shared("t_relw_");
    let (mut h, err) = pg.holder(&[], "r", "h");
    let held = "SELECT count(*) FROM t_relw_locks WHERE name = 'r'";
    let stall = Session::holding(
        "t-relw",
        "SELECT 1 FROM t_relw_tokens WHERE name = 'r' FOR UPDATE",
    );
    pg.let_go("h");
    wait_until("the release to wait for the row", T, || {
        PgServer::use_shared().psql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%t_relw_tokens%' AND application_name <> 't-relw'",
        ) == "1"
    });
    assert_eq!(
        PgServer::use_shared().psql(held),
        "1",
        "released past the row lock"
    );
    stall.cut_off();
    assert!(wait_exit(&mut h, T).success(), "{}", err.text());
    assert_eq!(PgServer::use_shared().psql(held), "0");
}

/// Some teams make SERIALIZABLE (or REPEATABLE READ) their database's default isolation. dlock
/// runs its statements in READ COMMITTED all the same: its waits for a name's counter row would
/// otherwise end in serialization failures (a contended run failing with 69, a release failing),
/// and dlocks making the tables at once in a new database in deadlocks. Here, in three new such
/// databases, 6 contenders make 3 runs each with `--wait`: every run gets its turn, no update of
/// the shared file is lost, and no run says a word.
#[cfg(feature = "postgres")]
#[test]
fn a_serializable_default_isolation_changes_nothing() {
    for db in ["t_serial1", "t_serial2", "t_serial3"] {
        let pg = {
            let server = PgServer::use_shared();
            server.psql(&format!("CREATE DATABASE {db}"));
            server.psql(&format!(
                "ALTER DATABASE {db} SET default_transaction_isolation = 'serializable'"
            ));
            Pg {
                url: server
                    .url_with("prefix=t_serial_")
                    .replace("/postgres?", &format!("/{db}?")),
                dir: LockDir::new(),
            }
        };
        let counter = pg.dir.file("counter");
        std::fs::write(&counter, "0").unwrap();
        let run = format!(
            "'{}' -q --backend postgres --url '{}' run -w 60 c -- \
             sh -c 'n=$(cat {c}); echo $((n + 1)) > {c}'",
            dlock_bin(),
            pg.url,
            c = counter.display()
        );
        let mut contenders: Vec<Child> = (0..6)
            .map(|_| {
                program("sh")
                    .arg("-c")
                    .arg(format!("for i in 1 2 3; do {run} || exit $?; done"))
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let errs: Vec<Stderr> = contenders.iter_mut().map(Stderr::of).collect();
        for (c, err) in contenders.iter_mut().zip(&errs) {
            assert!(wait_exit(c, T).success(), "{db}: {}", err.text());
        }
        // Not a word from any run (`-q`): no release failed either.
        for err in &errs {
            assert_eq!(err.text(), "", "{db}");
        }
        assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "18");
    }
}

/// dlock makes its tables and functions again whenever it finds one missing (a newer dlock on
/// tables an older one made). That must take no lock on a table that is there: it would wait for
/// the dlocks using it, and deadlock with them. Here another client keeps both tables in use (an
/// open transaction holding ROW EXCLUSIVE on them, as a dlock in the middle of an attempt does)
/// while `release --force` finds its function missing: it makes it again and answers at once.
#[cfg(feature = "postgres")]
#[test]
fn remaking_the_schema_takes_no_lock_on_tables_in_use() {
    let pg = Pg::shared("t_remake_");
    assert_eq!(code(&output(pg.dlock(&["run", "f", "--", "true"]))), 0);
    let busy = Session::holding(
        "t-remake",
        "BEGIN; LOCK TABLE t_remake_locks, t_remake_queue IN ROW EXCLUSIVE MODE",
    );
    PgServer::use_shared().psql("DROP FUNCTION t_remake_break_v3(text)");
    let out = output(pg.dlock(&["--connect-timeout", "3s", "release", "--force", "f"]));
    busy.cut_off();
    // Made again and answered: nobody held f (exit 1), not a wait that ran out (69).
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("was not held"), "{}", stderr(&out));
}
