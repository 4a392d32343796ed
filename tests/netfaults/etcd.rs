//! An etcd server down while a waiter waits: the waiter notices it back within its retry pace.
//! A fake etcd answering a lease TTL no real one would (i64::MAX, negative): dlock believes no
//! longer than it asked for, never panics, and refuses a lease that has already ended.

use std::time::{Duration, Instant};

use super::{hold, T};
use crate::etcd::fake_server::{FakeEtcd, REVISION};
use crate::etcd::server::EtcdServer;
use crate::support::watched::Watched;
use crate::support::*;

/// How long the server stays down: past the waiter's doubling pauses (they reach their longest,
/// 2 s, after 3 s) and the connection's own reconnect backoff.
const OUTAGE: Duration = Duration::from_secs(7);
/// The waiter's longest pause between tries (`RETRY_MOST`), and a second for a loaded machine.
const NOTICED_WITHIN: Duration = Duration::from_secs(3);

#[test]
fn an_etcd_waiter_notices_its_server_back_within_its_retry_pace() {
    let mut server = EtcdServer::start();
    let dir = LockDir::new();
    let at = |args: &[&str]| {
        let mut cmd = dlock();
        cmd.args(["--backend", "etcd", "--url", &server.url()])
            .args(args);
        cmd
    };
    let mut holder = at(&[
        "run",
        "--ttl",
        "30s",
        "back",
        "--",
        "sh",
        "-c",
        &hold(&dir, "h"),
    ])
    .spawn()
    .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = Watched::start(at(&["-v", "run", "-w", "60s", "back", "--", "true"]));
    waiter.wait_for("waiting for lock", T);
    server.stop();
    waiter.wait_for("still waiting for lock", T);
    // The fault itself: the server stays down this long.
    std::thread::sleep(OUTAGE);
    server.start_again();
    let back = Instant::now();
    waiter.wait_for("reached the backend again", T);
    let noticed = back.elapsed();
    std::fs::write(dir.file("h.go"), "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        noticed <= NOTICED_WITHIN,
        "the waiter noticed its server back after {noticed:?}:\n{stderr}"
    );
}

/// `dlock run --ttl 3s` on a fake etcd; its command writes its token and sleeps.
fn holder_on(fake: &FakeEtcd, dir: &LockDir, options: &[&str]) -> Watched {
    let script = format!(
        "echo $DLOCK_TOKEN > {}; exec sleep 60",
        dir.file("token").display()
    );
    let mut cmd = dlock();
    cmd.args(["--backend", "etcd", "--url", &fake.url()])
        .args(options)
        .args(["run", "--ttl", "3s"])
        .args(["fake", "--", "sh", "-c", &script]);
    Watched::start(cmd)
}

/// etcd answering a lease of i64::MAX seconds (granted, and at every keep-alive): dlock takes the
/// lock, renews it, and once etcd falls silent, gives it up within the 3 s it asked for, as if
/// etcd had said 3 s (no panic adding that TTL to a clock, no lock held for a year on the word of
/// a server that no longer answers).
#[test]
fn an_etcd_lease_ttl_of_i64_max_is_believed_no_longer_than_asked() {
    let fake = FakeEtcd::start(i64::MAX);
    let dir = LockDir::new();
    let mut holder = holder_on(&fake, &dir, &["-v"]);
    holder.wait_for_more("renewed", 2, T);
    assert!(
        fake.keep_alives() >= 2,
        "renewed by keep-alives answering i64::MAX"
    );
    let token = std::fs::read_to_string(dir.file("token")).unwrap();
    assert_eq!(token.trim(), REVISION.to_string());
    fake.fall_silent();
    let silent = Instant::now();
    holder.wait_for("lost the lock", Duration::from_secs(30));
    let took = silent.elapsed();
    let (status, stderr) = holder.finish(T);
    assert_eq!(status, 79, "{stderr}");
    // The last keep-alive answered went out at most a third of the ttl (1 s) before: the lease
    // ends 3 s after it, by dlock's count (plus a second for a loaded machine).
    assert!(
        took < Duration::from_secs(4),
        "held {took:?} after etcd fell silent:\n{stderr}"
    );
}

/// etcd granting a lease with a negative TTL (one that has already ended): 69 in one line, and
/// the command never runs.
#[test]
fn an_etcd_lease_granted_with_a_negative_ttl_is_refused() {
    let fake = FakeEtcd::start(-1);
    let dir = LockDir::new();
    let (status, stderr) = holder_on(&fake, &dir, &[]).finish(T);
    assert_eq!(status, 69, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("already ended"), "{stderr}");
    assert!(!dir.file("token").exists(), "the command ran: {stderr}");
}
