//! An etcd server down while a waiter waits: the waiter notices it back within its retry pace.

use std::time::{Duration, Instant};

use super::{hold, T};
use crate::support::etcd_server::EtcdServer;
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
