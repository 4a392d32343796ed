//! The PostgreSQL backend through Debian's PgBouncer in transaction mode: every call dlock makes is
//! one statement in a transaction of its own (no session state, no named prepared statements, no
//! advisory locks), so locks, tokens, the last runs, status and release work; only a waiter's
//! LISTEN is lost to whichever server connection ran it, and the waiter gets in at its re-check
//! instead.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::postgres::server::PgServer;
use crate::postgres::pgbouncer::PgBouncer;
use crate::support::watched::Watched;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn dlock_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "postgres", "--url", url]).args(args);
    cmd
}

#[test]
fn through_pgbouncer_in_transaction_mode_locks_exclude_and_a_waiter_gets_in() {
    let server = PgServer::start();
    let bouncer = PgBouncer::start(&server, "transaction");
    let url = bouncer.url_with("prefix=t_pool_");
    let dir = LockDir::new();
    let token = || {
        let out = output(dlock_at(
            &url,
            &["run", "pool", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
        ));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        stdout(&out).trim().parse::<u64>().unwrap()
    };
    assert_eq!((token(), token()), (1, 2));

    let hold = format!(
        "touch {0}/h.in; i=0; while [ ! -e {0}/h.go ] && [ $i -lt 600 ]; do sleep 0.05; \
         i=$((i+1)); done",
        dir.path().display()
    );
    let mut holder = dlock_at(
        &url,
        &["run", "--ttl", "3s", "pool", "--", "sh", "-c", &hold],
    )
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let out = output(dlock_at(&url, &["run", "-n", "pool", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(dlock_at(&url, &["status", "--json", "pool"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(status["holders"][0]["pid"], holder.id(), "{status}");

    let mut waiter = dlock_at(&url, &["run", "--ttl", "3s", "pool", "--", "touch"])
        .arg(dir.file("w.ran"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the waiter in line", T, || {
        server.psql("SELECT count(*) FROM t_pool_queue") == "1"
    });
    // Held through a renewal or two (each a transaction of its own) while the waiter waits.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!dir.file("w.ran").exists(), "the waiter passed the holder");
    std::fs::write(dir.file("h.go"), "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
    assert!(wait_exit(&mut waiter, T).success());
    assert!(dir.file("w.ran").exists());
    assert_eq!(token(), 5, "tokens went on counting");
    assert_eq!(server.psql("SELECT count(*) FROM t_pool_queue"), "0");
    // The last run and the last success, written in the transactions that acquire and release.
    let last = server.psql("SELECT last_run = last_success, last_run FROM t_pool_runs");
    let (same, run) = last.split_once('|').unwrap_or_else(|| panic!("{last:?}"));
    assert_eq!(same, "t", "{last}");
    let fields: Vec<&str> = run.split(' ').collect();
    assert_eq!(
        (fields[0], fields[1], fields[4]),
        ("run1", "5", "exit:0"),
        "{run}"
    );
}

/// Concurrency groups through PgBouncer in transaction mode (the holder hears a request at its
/// next read of the group records, LISTEN or not): a `--cancel-in-progress` holder is cancelled
/// (81, its command terminated) by a newer such run, which then runs; a `--supersede` waiter
/// gives way (80) to a newer one, which gets the lock once the holder is done.
#[test]
fn through_pgbouncer_in_transaction_mode_runs_cancel_and_supersede_each_other() {
    let server = PgServer::start();
    let bouncer = PgBouncer::start(&server, "transaction");
    let url = bouncer.url_with("prefix=t_group_");
    let dir = LockDir::new();
    let d = dir.path().display().to_string();
    let held_until_go = |tag: &str| {
        format!(
            "trap 'touch {d}/{tag}.term; exit 3' TERM; touch {d}/{tag}.in; i=0; \
             while [ ! -e {d}/{tag}.go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"
        )
    };
    let run = |options: &[&str], command: &[&str]| {
        let mut args = vec!["-v", "run"];
        args.extend_from_slice(options);
        args.extend_from_slice(&["g", "--"]);
        args.extend_from_slice(command);
        Watched::start(dlock_at(&url, &args))
    };

    let script = held_until_go("c");
    let holder = run(&["--cancel-in-progress"], &["sh", "-c", &script]);
    wait_for_file(&dir.file("c.in"), T);
    let asked = format!("{d}/asker.ran");
    let asker = run(&["--cancel-in-progress"], &["touch", &asked]);
    let (code, said) = holder.finish(T);
    assert_eq!(code, 81, "the cancelled holder: {said}");
    assert!(
        dir.file("c.term").exists(),
        "its command was not terminated: {said}"
    );
    let (code, said) = asker.finish(T);
    assert_eq!(code, 0, "the asker: {said}");
    assert!(Path::new(&asked).exists());

    let script = held_until_go("s");
    let holder = run(&[], &["sh", "-c", &script]);
    wait_for_file(&dir.file("s.in"), T);
    let (first, second) = (format!("{d}/first.ran"), format!("{d}/second.ran"));
    let mut older = run(&["--supersede"], &["touch", &first]);
    older.wait_for("waiting for lock", T);
    let mut newer = run(&["--supersede"], &["touch", &second]);
    newer.wait_for("waiting for lock", T);
    let (code, said) = older.finish(T);
    assert_eq!(code, 80, "the superseded waiter: {said}");
    std::fs::write(dir.file("s.go"), "").unwrap();
    let (code, said) = holder.finish(T);
    assert_eq!(code, 0, "{said}");
    let (code, said) = newer.finish(T);
    assert_eq!(code, 0, "the newer waiter: {said}");
    assert!(
        !Path::new(&first).exists(),
        "the superseded waiter ran its command"
    );
    assert!(Path::new(&second).exists());
}
