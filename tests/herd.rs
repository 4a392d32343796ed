//! The cron minute: many hosts fire `dlock run -n --min-hold 1h nightly -- job` at the same
//! second. On every store exactly one runs and every other exits with the conflict status (75),
//! none with 69: a server whose connection slots are all taken (PostgreSQL's and MySQL's
//! max_connections, here set far below the herd) is busy, not unreachable, and each run tries it
//! again within its connect budget. 100 runs; `DLOCK_LOAD=1`: 200 (the real minute's).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::etcd::server::EtcdServer;
use crate::mysql::server::MyServer;
use crate::postgres::server::PgServer;
use crate::support::target::Target;
use crate::support::*;

fn herd_size() -> usize {
    load(100, 200)
}

/// The connection slots of the SQL servers the herd meets: far fewer than the herd.
const MAX_CONNECTIONS: usize = 10;

/// Each run's connect budget: a run meeting a full server waits its turn within it. Longer than
/// the default, which a release build needs far less of: here a debug build's authentication
/// (PostgreSQL's SCRAM) holds each slot many times longer, on a machine other tests load too.
const CONNECT_BUDGET: &str = "30s";

/// Every run of the herd, killed if the test ends before they do.
struct Herd(Vec<Child>);

impl Drop for Herd {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the herd on `base` (the backend's arguments), all at once, and checks that exactly one
/// ran the job and every other run exited with 75.
fn herd(label: &str, base: &[String]) {
    let count = herd_size();
    let dir = LockDir::new();
    let ran = dir.file("ran");
    let job = format!("echo ran >> {}", ran.display());
    // A name of its own on a shared server: its min-hold outlasts the test.
    let name = format!("nightly-{label}-{}", std::process::id());
    let started = Instant::now();
    let mut runs = Herd(Vec::with_capacity(count));
    for _ in 0..count {
        let child = dlock()
            .args(base)
            .args(["--connect-timeout", CONNECT_BUDGET])
            .args([
                "run",
                "-n",
                "--min-hold",
                "1h",
                &name,
                "--",
                "sh",
                "-c",
                &job,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        runs.0.push(child);
    }
    let bound = Duration::from_secs(60 + count as u64 / 2);
    let mut codes = std::collections::BTreeMap::<i32, usize>::new();
    let mut odd = Vec::new();
    for child in &mut runs.0 {
        let left = bound.saturating_sub(started.elapsed());
        let code = wait_exit(child, left).code().unwrap_or(-1);
        *codes.entry(code).or_default() += 1;
        if code != 0 && code != 75 && odd.len() < 3 {
            let mut err = String::new();
            use std::io::Read;
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            odd.push(format!("{code}: {}", err.trim_end()));
        }
    }
    eprintln!(
        "{label}: {count} runs in {:.1?}: {codes:?}",
        started.elapsed()
    );
    let want = std::collections::BTreeMap::from([(0, 1), (75, count - 1)]);
    assert_eq!(codes, want, "{label}: exit statuses {codes:?}; {odd:#?}");
    let jobs = std::fs::read_to_string(&ran).unwrap_or_default();
    assert_eq!(jobs.lines().count(), 1, "{label}: the job ran {jobs:?}");
}

#[test]
fn herd_on_file_gives_one_run_and_the_rest_busy() {
    herd("file", &Target::file_backend().args);
}

#[test]
fn herd_on_redis_gives_one_run_and_the_rest_busy() {
    herd("redis", &Target::suite_redis().args);
}

#[test]
fn herd_on_zk_gives_one_run_and_the_rest_busy() {
    herd("zk", &Target::suite_zk().args);
}

#[test]
fn herd_on_etcd_gives_one_run_and_the_rest_busy() {
    let base = ["--backend", "etcd", "--url", &EtcdServer::shared().url()].map(String::from);
    herd("etcd", &base);
}

#[test]
fn herd_on_elasticsearch_gives_one_run_and_the_rest_busy() {
    herd("elasticsearch", &Target::suite_elasticsearch().args);
}

#[test]
fn herd_on_a_full_postgres_gives_one_run_and_the_rest_busy() {
    let server = PgServer::start_with(vec![format!("max_connections={MAX_CONNECTIONS}")]);
    let base = [
        "--backend",
        "postgres",
        "--url",
        &server.url_with("prefix=t_herd_"),
    ];
    herd("postgres", &base.map(String::from));
}

#[test]
fn herd_on_a_full_mysql_gives_one_run_and_the_rest_busy() {
    let server = MyServer::start_with(vec![format!("--max-connections={MAX_CONNECTIONS}")]);
    let base = [
        "--backend",
        "mysql",
        "--url",
        &server.url_with("prefix=t_herd_"),
    ];
    herd("mysql", &base.map(String::from));
}

/// Fills every connection slot of a server with waiters on a lock held for an hour, then checks
/// that `dlock run -n` meets the full server, tries it again for its connect budget, and only
/// then exits with 69, naming the server's limit; and that a waiter does so only once its
/// `--wait` is spent.
fn full_server_is_named_after_the_connect_budget(label: &str, base: &[String]) {
    let name = format!("full-{label}-{}", std::process::id());
    let run = |args: &[&str]| {
        let mut cmd = dlock();
        cmd.args(base)
            .arg("run")
            .args(args)
            .args([&name, "--", "true"]);
        cmd
    };
    assert_eq!(code(&output(run(&["-n", "--min-hold", "1h"]))), 0);
    // More waiters than slots: each holds its connections while it waits.
    let mut waiters = Herd(Vec::new());
    for _ in 0..MAX_CONNECTIONS {
        let mut cmd = run(&["-w", "5m"]);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        waiters.0.push(cmd.spawn().unwrap());
    }
    let end = Instant::now() + Duration::from_secs(60);
    // Bounded: 60 s. A probe that still finds a slot finds the lock busy (75).
    loop {
        let mut cmd = dlock();
        cmd.args(base)
            .args(["--connect-timeout", "2s", "run", "-n", &name, "--", "true"]);
        let started = Instant::now();
        let out = output(cmd);
        let took = started.elapsed();
        let err = stderr(&out);
        if code(&out) == 69 {
            assert!(err.contains("max_connections"), "{label}: {err}");
            assert!(
                took >= Duration::from_millis(1800),
                "{label}: gave up after {took:?}: {err}"
            );
            assert_eq!(err.trim_end().lines().count(), 1, "{label}: {err}");
            break;
        }
        assert_eq!(code(&out), 75, "{label}: {err}");
        assert!(
            Instant::now() < end,
            "{label}: the waiters never filled the server"
        );
    }
    // A run's first connection has the whole connect budget, however short its lease: only a
    // renewal's reconnect is bounded by the ttl. The message names the limit that applied.
    let (status, took, err) = timed(
        base,
        &["--connect-timeout", "3s", "run", "-n", "--ttl", "1s", &name],
    );
    assert_eq!(status, 69, "{label}, --ttl 1s: {err}");
    assert!(
        took >= Duration::from_millis(2800),
        "{label}, --ttl 1s: gave up after {took:?}: {err}"
    );
    assert!(err.contains("(--connect-timeout)"), "{label}: {err}");
    // A waiter waits for a slot as for the lock, for its --wait, saying meanwhile that the
    // server is full, and then gives up with 69 naming the limit.
    let (status, took, err) = timed(base, &["--connect-timeout", "1s", "run", "-w", "4s", &name]);
    assert_eq!(status, 69, "{label}: {err}");
    assert!(
        took >= Duration::from_secs(3),
        "{label}: gave up after {took:?}: {err}"
    );
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(last.contains("max_connections"), "{label}: {err}");
}

/// `dlock BASE ARGS -- true`: its status, how long it took, and what it said.
fn timed(base: &[String], args: &[&str]) -> (i32, Duration, String) {
    let mut cmd = dlock();
    cmd.args(base).args(args).args(["--", "true"]);
    let started = Instant::now();
    let out = output(cmd);
    (code(&out), started.elapsed(), stderr(&out))
}

#[test]
fn a_full_postgres_is_tried_again_and_then_named_with_its_limit() {
    let server = PgServer::start_with(vec![format!("max_connections={MAX_CONNECTIONS}")]);
    let base = [
        "--backend",
        "postgres",
        "--url",
        &server.url_with("prefix=t_full_"),
    ];
    full_server_is_named_after_the_connect_budget("postgres", &base.map(String::from));
}

#[test]
fn a_full_mysql_is_tried_again_and_then_named_with_its_limit() {
    let server = MyServer::start_with(vec![format!("--max-connections={MAX_CONNECTIONS}")]);
    let base = [
        "--backend",
        "mysql",
        "--url",
        &server.url_with("prefix=t_full_"),
    ];
    full_server_is_named_after_the_connect_budget("mysql", &base.map(String::from));
}
