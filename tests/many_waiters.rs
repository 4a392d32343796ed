//! Many waiters on one lock, on etcd, PostgreSQL and MySQL: all get through, in arrival order, and
//! a handoff costs the same whatever the length of the line. Counted at the server, not timed:
//! etcd's watch events (one per release: each waiter watches only the key just ahead of it),
//! PostgreSQL's statement log and MySQL's general log (the granted attempt and the release, nothing
//! from the waiters still in line).
//! 50 waiters (queued one by one, each a process and a connection or two: on a loaded two-core
//! machine a minute for 100); `DLOCK_LOAD=1`: 1,000.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::etcd::server::EtcdServer;
use crate::mysql::server::MyServer;
use crate::postgres::server::PgServer;
use crate::support::*;

fn waiter_count() -> usize {
    load(50, 1000)
}

/// Long enough that no waiter re-checks (a third of the ttl) while the line drains.
const TTL: &str = "10m";

fn within(count: usize) -> Duration {
    Duration::from_secs(60 + count as u64 / 2)
}

/// `dlock ARGS run --ttl TTL NAME -- sh -c 'echo I >> order'`, in the background.
fn waiter(base: &[String], name: &str, i: usize, dir: &LockDir) -> Child {
    let script = format!("echo {i} >> {}", dir.file("order").display());
    dlock()
        .args(base)
        .args(["run", "--ttl", TTL, name, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A holder of NAME until `dir/go` appears, started once it holds.
fn holder(base: &[String], name: &str, dir: &LockDir) -> Child {
    let script = format!(
        "touch {in_}; i=0; while [ ! -e {go} ] && [ $i -lt 6000 ]; do sleep 0.05; i=$((i+1)); done",
        in_ = dir.file("h.in").display(),
        go = dir.file("go").display()
    );
    let child = dlock()
        .args(base)
        .args(["run", "--ttl", TTL, name, "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), Duration::from_secs(60));
    child
}

/// `count` waiters started one by one, each once `in_line(i)` says waiter `i` is in line:
/// arrival order is what the tests check.
fn line_up(
    base: &[String],
    dir: &LockDir,
    count: usize,
    in_line: impl Fn(usize) -> bool,
) -> Vec<Child> {
    (0..count)
        .map(|i| {
            let child = waiter(base, "many", i, dir);
            wait_until(
                &format!("waiter {i} in line"),
                Duration::from_secs(60),
                || in_line(i),
            );
            child
        })
        .collect()
}

/// Lets the holder go, waits for everyone, and checks that all came through in arrival order.
fn drain(mut holder: Child, mut waiters: Vec<Child>, dir: &LockDir) {
    let count = waiters.len();
    std::fs::write(dir.file("go"), "").unwrap();
    assert!(wait_exit(&mut holder, within(count)).success());
    for (i, w) in waiters.iter_mut().enumerate() {
        assert!(wait_exit(w, within(count)).success(), "waiter {i}");
    }
    let order = std::fs::read_to_string(dir.file("order")).unwrap();
    let order: Vec<usize> = order.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(order, (0..count).collect::<Vec<_>>(), "arrival order");
}

#[test]
fn etcd_many_waiters_all_get_through_with_one_watch_event_per_release() {
    let server = EtcdServer::start();
    let base = vec![
        "--backend".to_owned(),
        "etcd".to_owned(),
        "--url".to_owned(),
        server.url(),
    ];
    let dir = LockDir::new();
    let count = waiter_count();
    let holder = holder(&base, "many", &dir);
    let started = Instant::now();
    let waiters = line_up(&base, &dir, count, |i| server.keys("/dlock/many/") == i + 2);
    let before = server.events_sent();
    let in_line = started.elapsed();
    drain(holder, waiters, &dir);
    let events = server.events_sent() - before;
    eprintln!(
        "etcd: {count} waiters in line in {in_line:.1?}, all through in {:.1?} \
         ({:.1?} a handoff), {events} watch events for {count} releases",
        started.elapsed() - in_line,
        (started.elapsed() - in_line) / count as u32
    );
    // One event per release but the last (nobody watches the last key): the holder's and the
    // first count - 1 waiters'.
    assert_eq!(events, count as u64);
}

/// How many looks at the holders (holders.sql) the server logged for connections named `app`.
fn looks_by(server: &PgServer, app: &str) -> usize {
    server
        .log()
        .lines()
        .filter(|l| l.starts_with(&format!("{app}|")) && l.contains("-- The live holders"))
        .count()
}

/// The statements the server logged for connections named `app` (simple queries and executions
/// of the extended protocol, one log line each): the calls, and apart the BEGIN and COMMIT that
/// wrap each call in a READ COMMITTED transaction (sent with it, in the same round trip).
fn statements_by(server: &PgServer, app: &str) -> (usize, usize) {
    let log = server.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with(&format!("{app}|")))
        .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
        .collect();
    let wrapping = lines
        .iter()
        .filter(|l| {
            l.ends_with("statement: BEGIN ISOLATION LEVEL READ COMMITTED")
                || l.ends_with("statement: COMMIT")
        })
        .count();
    (lines.len() - wrapping, wrapping)
}

#[test]
fn postgres_many_waiters_all_get_through_with_two_statements_per_handoff() {
    let count = waiter_count();
    let server = PgServer::start_with(vec![format!("max_connections={}", count + 50)]);
    let url = |app: &str| server.url_with(&format!("prefix=t_many_&application_name={app}"));
    let base = |app: &str| {
        vec![
            "--backend".to_owned(),
            "postgres".to_owned(),
            "--url".to_owned(),
            url(app),
        ]
    };
    let dir = LockDir::new();
    let holder = holder(&base("dlockholder"), "many", &dir);
    // In line, and done with its statements: its look at the holders is the last it sends.
    let waiters = line_up(&base("dlockwaiter"), &dir, count, |i| {
        server.psql("SELECT count(*) FROM t_many_queue") == (i + 1).to_string()
            && looks_by(&server, "dlockwaiter") > i
    });
    // Each waiter sent its LISTEN, its first attempt and the look at the holders; then nothing.
    let (calls, wrapping) = statements_by(&server, "dlockwaiter");
    drain(holder, waiters, &dir);
    let after = statements_by(&server, "dlockwaiter");
    let (calls, wrapping) = (after.0 - calls, after.1 - wrapping);
    // Each handoff: the granted attempt of the waiter let in (which answers the lock's group
    // record with the grant: a run with --cancel-in-progress may have reserved the lock, see
    // supervise/group.rs), and later its release. No waiter still in line sends anything: the
    // release notifies only the one it lets in.
    assert_eq!(
        calls,
        2 * count,
        "statements while {count} waiters went through"
    );
    assert_eq!(wrapping, 2 * calls, "a BEGIN and a COMMIT with each call");
}

#[test]
fn mysql_many_waiters_all_get_through_with_three_statements_per_handoff() {
    let count = waiter_count();
    // Each waiter in line keeps two sessions: its place (holding its own lock key) and its
    // doorbell (blocked on the key of the one ahead).
    let server = MyServer::start_with(vec![format!("--max-connections={}", 2 * count + 50)]);
    server.log_statements();
    let base = vec![
        "--backend".to_owned(),
        "mysql".to_owned(),
        "--url".to_owned(),
        server.url_with("prefix=t_many_"),
    ];
    let dir = LockDir::new();
    let holder = holder(&base, "many", &dir);
    let started = Instant::now();
    let waiters = line_up(&base, &dir, count, |i| {
        server.sql("SELECT count(*) FROM t_many_queue") == (i + 1).to_string()
    });
    // Every waiter past its first slice, blocked on its doorbell.
    wait_until("every waiter on its doorbell", within(count), || {
        server.dlock_sessions() == 1 + 2 * count
    });
    let before = server.dlock_statements();
    let in_line = started.elapsed();
    drain(holder, waiters, &dir);
    let through = started.elapsed() - in_line;
    let during = server.dlock_statements() - before;
    eprintln!(
        "mysql: {count} waiters in line in {in_line:.1?}, all through in {through:.1?} \
         ({:.1?} a handoff), {during} statements",
        through / count as u32
    );
    // The holder's release, then for each waiter its granted attempt, its look at the lock's
    // group record (a run with --cancel-in-progress may have reserved the lock:
    // supervise/group.rs) and its release. No waiter still in line sends anything: the release
    // frees only the key its successor waits on.
    assert_eq!(
        during,
        3 * count + 1,
        "statements while {count} waiters went through"
    );
}
