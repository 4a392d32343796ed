//! The Redis backend's own mechanism against real redis-servers (each test starts its own): every
//! way of losing a lease (key deleted, server stopped or restarted empty, holder killed), waiting
//! by events in arrival order that leaves nothing behind, one connection per run, Redlock over
//! three and five servers (redlock.rs), a forced failover behind Sentinel with and without
//! `--replicas`, measured (failover.rs, with `DLOCK_LOAD=1`), passwords, TLS and bad addresses (access.rs), Redis Cluster
//! (cluster.rs: redirects, names on several masters, slots moved while held), keys of the wrong
//! type another client wrote in dlock's namespace (wrong_type.rs), the last run and last success
//! each store keeps, read raw (last_run.rs). What every backend owes is in the contract suite.
//!
//! Beside them, what the rest of the suite uses of Redis, in every build: its servers (server.rs,
//! cluster_server.rs, sentinel_set.rs; sentinel_faults.rs and failover_case.rs for the fault
//! checker and the failover cases), its description (store.rs) and its targets (targets.rs).

// Its tests are built with the redis feature only; without it, what they share goes unused.
#![cfg_attr(not(feature = "redis"), allow(dead_code, unused_imports))]

use std::process::Child;
use std::time::{Duration, Instant};

// What the rest of the suite uses of this store, in every build.
pub mod cluster_server;
pub mod failover_case;
pub mod sentinel_faults;
pub mod sentinel_set;
pub mod server;
pub mod store;
pub mod targets;

#[cfg(feature = "redis")]
mod access;
#[cfg(feature = "redis")]
mod cluster;
#[cfg(feature = "redis")]
mod failover;
#[cfg(feature = "redis")]
mod last_run;
#[cfg(feature = "redis")]
mod redlock;
#[cfg(feature = "redis")]
mod sentinel;
#[cfg(feature = "redis")]
mod waiting;
#[cfg(feature = "redis")]
mod wrong_type;

#[cfg(feature = "redis")]
use waiting::queued;

use crate::redis::server::{dlock_at, RedisServer};
use crate::support::watched::Watched;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn urls(servers: &[&RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// A `dlock -v run OPTIONS NAME` whose command writes its pid to `pid_file` and then sleeps, with
/// stderr watched so a test can wait for events such as "renewed".
fn start_holder(
    urls: &[String],
    options: &[&str],
    name: &str,
    pid_file: &std::path::Path,
) -> Watched {
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut args = vec!["-v", "run"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    Watched::start(dlock_at(urls, &args))
}

/// Asserts that a holder loses its lock after `event`: dlock exits 79 within ttl + kill-after
/// (plus slack for a loaded machine), says why, and its command is gone.
fn assert_lost_after(
    holder: Watched,
    child_pid: u32,
    event: Instant,
    ttl_and_kill_after: Duration,
    reasons: &[&str],
) {
    let (status, stderr) = holder.finish(T);
    let took = event.elapsed();
    assert_eq!(status, 79, "{stderr}");
    assert!(
        stderr.contains("lost the lock") && reasons.iter().any(|r| stderr.contains(r)),
        "expected a loss because of {reasons:?}:\n{stderr}"
    );
    assert!(
        took < ttl_and_kill_after + Duration::from_secs(2),
        "took {took:?} to end after the lock was lost"
    );
    assert!(!alive(child_pid), "the command must not outlive the lock");
}

/// `count` shell loops each running `dlock run` `iterations` times on the lock "counter".
fn contenders(
    urls: &[String],
    count: usize,
    iterations: usize,
    mode: &[&str],
    script: &str,
) -> Vec<Child> {
    (0..count)
        .map(|_| {
            let mut words = vec!["--backend", "redis"];
            for url in urls {
                words.extend_from_slice(&["--url", url]);
            }
            words.push("run");
            words.extend_from_slice(mode);
            words.extend_from_slice(&["counter", "--", "sh", "-c", script]);
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            let looped = format!(
                "for i in $(seq {iterations}); do {} {} || exit 1; done",
                dlock_bin(),
                quoted.join(" ")
            );
            program("sh")
                .arg("-c")
                .arg(looped)
                .env_remove("DLOCK_URL")
                .spawn()
                .expect("start contender")
        })
        .collect()
}

#[cfg(feature = "redis")]
#[test]
fn redlock_contenders_on_three_servers_lose_no_update() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = LockDir::new();
    let counter = dir.file("counter");
    std::fs::write(&counter, "0").unwrap();
    let rmw = format!("n=$(cat {c}); echo $((n + 1)) > {c}", c = counter.display());
    let all = urls(&servers.iter().collect::<Vec<_>>());
    let started = Instant::now();
    // A long lease makes the fallback re-check slow (10s): every handoff must come by a message,
    // including after two waiters each got only part of the servers.
    for mut c in contenders(&all, 6, 8, &["--ttl", "30s"], &rmw) {
        assert!(wait_exit(&mut c, T).success());
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "48");
    let took = started.elapsed();
    // Each lost grant costs a 10s fallback: none may be lost (waiters arriving together used to
    // be ordered differently by each server, which then granted the lock to different waiters).
    assert!(
        took < Duration::from_secs(9),
        "48 acquisitions took {took:?}: a grant was lost"
    );
}

#[cfg(feature = "redis")]
#[test]
fn deleting_the_key_by_hand_ends_the_holders_run_with_79() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "gone",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    delete_holders_and_see_the_loss(&server, "gone", holder, child, Duration::from_secs(2));
}

/// Deletes the holders key of `name` by hand: `holder` must then lose the lock (its command
/// `child` ended) within `ttl_and_kill_after`.
fn delete_holders_and_see_the_loss(
    server: &RedisServer,
    name: &str,
    holder: Watched,
    child: u32,
    ttl_and_kill_after: Duration,
) {
    let deleted: i64 = redis::cmd("DEL")
        .arg(format!("dlock:{{{name}}}:holders"))
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(deleted, 1);
    assert_lost_after(
        holder,
        child,
        Instant::now(),
        ttl_and_kill_after,
        &["no longer ours"],
    );
}

#[cfg(feature = "redis")]
#[test]
fn a_server_stopped_past_the_deadline_ends_the_holders_run_with_79() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "frozen",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    holder.wait_for_more("renewed", 1, T);
    server.pause();
    let stopped = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_lost_after(holder, child, stopped, Duration::from_secs(2), &["ran out"])
    }));
    server.resume();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_server_restarted_empty_ends_the_holders_run_with_79() {
    let mut server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut holder = start_holder(
        &url,
        &["--ttl", "1s", "--kill-after", "1s"],
        "amnesia",
        &dir.file("pid"),
    );
    let child = read_pid(&dir.file("pid"));
    holder.wait_for_more("renewed", 1, T);
    server.restart_empty();
    let restarted = Instant::now();
    assert_lost_after(
        holder,
        child,
        restarted,
        Duration::from_secs(2),
        // "not ours" once it answers again; "ran out" if the restart took longer than the lease.
        &["no longer ours", "ran out"],
    );
}

#[cfg(feature = "redis")]
#[test]
fn a_sigkilled_holder_frees_the_lock_within_its_ttl() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let url = [server.url()];
    let mut holder = start_holder(&url, &["--ttl", "1s"], "crash", &dir.file("pid"));
    read_pid(&dir.file("pid"));
    let next = dir.file("next");
    let mut waiter = dlock_at(
        &url,
        &["run", "crash", "--", "touch", next.to_str().unwrap()],
    )
    .spawn()
    .unwrap();
    wait_until("the waiter to queue", T, || queued(&server, "crash") == 1);
    holder.child.kill().unwrap();
    let killed = Instant::now();
    let _ = holder.child.wait();
    wait_for_file(&next, T);
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "the next waiter waited {took:?} for a 1s lease"
    );
    assert!(wait_exit(&mut waiter, T).success());
}

#[cfg(feature = "redis")]
#[test]
fn names_with_braces_and_spaces_stay_inside_one_hash_tag() {
    let server = RedisServer::start();
    let url = [server.url()];
    let name = "a}b{c d*";
    let out = output(dlock_at(
        &url,
        &["run", name, "--", "sh", "-c", "echo \"$DLOCK_NAME\""],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), name);
    assert_eq!(
        server.keys(),
        [
            "dlock:{a%7Db%7Bc%20d%2A}:last-run",
            "dlock:{a%7Db%7Bc%20d%2A}:last-success",
            "dlock:{a%7Db%7Bc%20d%2A}:token"
        ]
    );
}

#[cfg(feature = "redis")]
#[test]
fn the_busy_line_says_what_min_hold_keeps_on_one_server_and_on_redlock() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let one = [servers[0].url()];
    let three: Vec<String> = servers.iter().map(|s| s.url()).collect();
    for urls in [&one[..], &three[..]] {
        let out = output(dlock_at(
            urls,
            &["run", "--min-hold", "1h", "mh", "--", "true"],
        ));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let busy = output(dlock_at(urls, &["run", "-n", "mh", "--", "true"]));
        let broken = output(dlock_at(urls, &["release", "--force", "mh"]));
        assert_eq!(code(&busy), 75, "{}", stderr(&busy));
        assert!(
            stderr(&busy).contains(", kept ")
                && stderr(&busy).contains("by --min-hold 1h; its command ended"),
            "{urls:?}: {}",
            stderr(&busy)
        );
        assert_eq!(code(&broken), 0, "{}", stderr(&broken));
        assert!(
            stdout(&broken).contains("by --min-hold 1h"),
            "release --force names what it ended: {}",
            stdout(&broken)
        );
    }
}
