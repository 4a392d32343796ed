//! A waiter whose server stops or freezes mid-wait still ends at its `--wait` deadline (75), and a
//! signal still ends it promptly (143), on every network store family: a call to a server that
//! answers nothing, or the cleanup after the wait, must not outlast either.

use std::process::Command;
use std::time::{Duration, Instant};

use super::{hold, T};
#[cfg(feature = "etcd")]
use crate::etcd::server::EtcdServer;
use crate::redis::cluster_server::RedisCluster;
use crate::redis::sentinel_set::SentinelSet;
use crate::redis::server::{dlock_at, RedisServer};
use crate::support::watched::Watched;
use crate::support::*;

/// The timed waiter's `--wait`.
const WAIT: Duration = Duration::from_secs(2);
/// How late past its deadline, or past a signal, a waiter may exit on a loaded machine. It leaves
/// within half a second (`LEAVE_WITHIN`); a ZooKeeper waiter took 1.6 s once among fourteen tests
/// at a time. Below the 5 s connect timeout and the 30 s lease, which a waiter stuck on the frozen
/// server would wait out.
const MARGIN: Duration = Duration::from_secs(3);

/// A holder of `name`, then two waiters for it: one that waits `WAIT`, one that waits long and is
/// sent SIGTERM. Once both wait, `fault` stops or freezes the server, and the signal is sent. Checks that the timed waiter exits 75
/// within `WAIT` and `MARGIN` of its start and the signalled one 143 within `MARGIN` of the
/// signal; then `mend` undoes the fault and the holder is let go. `ttl`: the waiters' `--ttl`.
fn waiters_end_in_time(
    at: impl Fn(&[&str]) -> Command,
    name: &str,
    ttl: &str,
    fault: impl FnOnce(),
    mend: impl FnOnce(),
) {
    let dir = LockDir::new();
    let script = hold(&dir, "h");
    let mut holder = at(&["run", "--ttl", "30s", name, "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let mut signalled = Watched::start(at(&["run", "--ttl", ttl, "-w", "60s", name, "--", "true"]));
    signalled.wait_for("waiting for lock", T);
    let wait = format!("{}ms", WAIT.as_millis());
    let timed_start = Instant::now();
    let mut timed = Watched::start(at(&["run", "--ttl", ttl, "-w", &wait, name, "--", "true"]));
    timed.wait_for("waiting for lock", T);
    fault();
    let sent = Instant::now();
    signal(signalled.child.id(), libc::SIGTERM);
    // Both at once: each one's exit is seen within 5 ms of it.
    let (mut timed_end, mut signalled_end) = (None, None);
    let end = Instant::now() + T;
    while (timed_end.is_none() || signalled_end.is_none()) && Instant::now() < end {
        if timed_end.is_none() && timed.child.try_wait().unwrap().is_some() {
            timed_end = Some(Instant::now());
        }
        if signalled_end.is_none() && signalled.child.try_wait().unwrap().is_some() {
            signalled_end = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    mend();
    std::fs::write(dir.file("h.go"), "").unwrap();
    wait_exit(&mut holder, T);
    let (timed_code, timed_err) = timed.finish(T);
    let (signalled_code, signalled_err) = signalled.finish(T);
    let took = timed_end.map(|e| e - timed_start);
    assert_eq!(timed_code, 75, "{timed_err}");
    assert!(
        took.is_some_and(|t| t <= WAIT + MARGIN),
        "-w {wait} ended after {took:?}:\n{timed_err}"
    );
    let after = signalled_end.map(|e| e - sent);
    assert_eq!(signalled_code, 128 + libc::SIGTERM, "{signalled_err}");
    assert!(
        after.is_some_and(|t| t <= MARGIN),
        "SIGTERM ended the wait after {after:?}:\n{signalled_err}"
    );
}

#[test]
fn a_redis_waiter_ends_in_time_when_its_server_freezes() {
    let server = RedisServer::start();
    waiters_end_in_time(
        |args| server.dlock(args),
        "frozen",
        "30s",
        || server.pause(),
        || server.resume(),
    );
}

#[test]
fn a_sentinel_waiter_ends_in_time_when_its_master_freezes() {
    // Sentinels slow to call the master down: no failover during the test.
    let set = SentinelSet::start_watching(&[], Duration::from_secs(60));
    let url = set.url();
    waiters_end_in_time(
        |args| dlock_at(&[&url], args),
        "frozen",
        "30s",
        || set.master().pause(),
        || set.master().resume(),
    );
}

#[test]
fn a_cluster_waiter_ends_in_time_when_its_master_freezes() {
    let cluster = RedisCluster::start();
    let url = cluster.url();
    let node = cluster.node_of_lock("frozen");
    waiters_end_in_time(
        |args| dlock_at(&[&url], args),
        "frozen",
        "30s",
        || cluster.nodes[node].pause(),
        || cluster.nodes[node].resume(),
    );
}

#[cfg(feature = "etcd")]
#[test]
fn an_etcd_waiter_ends_in_time_when_its_server_freezes() {
    let server = EtcdServer::start();
    let url = server.url();
    waiters_end_in_time(
        |args| {
            let mut cmd = dlock();
            cmd.args(["--backend", "etcd", "--url", &url]).args(args);
            cmd
        },
        "frozen",
        "30s",
        || signal(server.pid(), libc::SIGSTOP),
        || signal(server.pid(), libc::SIGCONT),
    );
}

#[cfg(feature = "zk")]
#[test]
fn a_zookeeper_waiter_ends_in_time_when_its_server_freezes() {
    let server = crate::zk::server::ZkServer::start();
    waiters_end_in_time(
        |args| server.dlock(args),
        "frozen",
        "30s",
        || signal(server.pid(), libc::SIGSTOP),
        || signal(server.pid(), libc::SIGCONT),
    );
}

#[cfg(feature = "mysql")]
#[test]
fn a_mysql_waiter_ends_in_time_when_its_server_freezes() {
    let server = crate::mysql::server::MyServer::start();
    let url = server.url_with("");
    waiters_end_in_time(
        |args| {
            let mut cmd = dlock();
            cmd.args(["--backend", "mysql", "--url", &url]).args(args);
            cmd
        },
        "frozen",
        "30s",
        || signal(server.pid(), libc::SIGSTOP),
        || signal(server.pid(), libc::SIGCONT),
    );
}
