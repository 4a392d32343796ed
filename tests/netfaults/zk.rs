//! A ZooKeeper server down while a waiter waits, long enough or not for sessions to expire.

use std::process::Child;
use std::time::{Duration, Instant};

use super::{hold, T};
use crate::support::watched::Watched;
use crate::support::*;
use crate::zk::server::ZkServer;

/// A holder of `name` whose command runs until `h.go` exists in `dir`; back once it runs.
fn holding(server: &ZkServer, dir: &LockDir, options: &[&str], name: &str) -> Child {
    let script = hold(dir, "h");
    let mut args = vec!["run"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let child = server.dlock(&args).spawn().unwrap();
    wait_for_file(&dir.file("h.in"), T);
    child
}

#[test]
fn a_zookeeper_waiter_reports_an_outage_and_still_gets_the_lock() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    let holder = holding(&server, &dir, &["--ttl", "30s"], "z");
    let mut waiter = Watched::start(server.dlock(&[
        "-v", "run", "--ttl", "30s", "-w", "60s", "z", "--", "sh", "-c", "exit 7",
    ]));
    wait_until("the waiter to queue", T, || {
        server.queue("/dlock/z").is_some_and(|c| c.len() == 2)
    });
    server.stop();
    waiter.wait_for("; still waiting for lock \"z\"", T);
    server.start_again();
    std::fs::write(dir.file("h.go"), "").unwrap();
    let mut holder = holder;
    assert!(wait_exit(&mut holder, T).success());
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 7, "{stderr}");
    assert!(stderr.contains("cannot reach ZooKeeper"), "{stderr}");
}

#[test]
fn a_zookeeper_waiter_gives_up_with_75_when_its_wait_ends_during_an_outage() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    let mut holder = holding(&server, &dir, &[], "z");
    let mut waiter = Watched::start(server.dlock(&["run", "-w", "3s", "z", "--", "true"]));
    wait_until("the waiter to queue", T, || {
        server.queue("/dlock/z").is_some_and(|c| c.len() == 2)
    });
    server.stop();
    let (code, stderr) = {
        waiter.wait_for("; still waiting", T);
        waiter.finish(T)
    };
    assert_eq!(code, 75, "{stderr}");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_zookeeper_waiter_whose_session_expires_in_an_outage_queues_again_and_gets_the_lock() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    // The holder's session (2s) expires in the outage too: it loses the lock (79), and its node
    // goes when the restarted server expires that session.
    let mut holder = holding(&server, &dir, &["--ttl", "2s"], "z");
    let ran = dir.file("waiter.ran");
    let mut waiter = Watched::start(server.dlock(&[
        "run",
        "--ttl",
        "2s",
        "-w",
        "60s",
        "z",
        "--",
        "sh",
        "-c",
        &format!("touch {}", ran.display()),
    ]));
    wait_until("the waiter to queue", T, || {
        server.queue("/dlock/z").is_some_and(|c| c.len() == 2)
    });
    server.stop();
    // The client gives the session up after 7/5 of its timeout without the server.
    waiter.wait_for_line("the waiter's session to expire", T, |l| {
        l.to_ascii_lowercase().contains("expired")
    });
    assert_eq!(wait_exit(&mut holder, T).code(), Some(79));
    server.start_again();
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 0, "{stderr}");
    assert!(ran.exists(), "{stderr}");
    assert!(stderr.contains("cannot reach ZooKeeper"), "{stderr}");
    assert!(stderr.contains("unreachable for"), "{stderr}");
    assert!(stderr.contains("reached the backend again"), "{stderr}");
}

#[test]
fn a_zookeeper_waiter_whose_session_expires_in_an_outage_gives_up_with_75_at_its_deadline() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    let mut holder = holding(&server, &dir, &["--ttl", "2s"], "z");
    let waiter =
        Watched::start(server.dlock(&["run", "--ttl", "2s", "-w", "8s", "z", "--", "true"]));
    wait_until("the waiter to queue", T, || {
        server.queue("/dlock/z").is_some_and(|c| c.len() == 2)
    });
    let stopped = Instant::now();
    server.stop();
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("cannot reach ZooKeeper"), "{stderr}");
    // Its session expired after 2.8s without the server; the wait still ran to its deadline.
    assert!(stopped.elapsed() >= Duration::from_secs(4), "{stderr}");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_zookeeper_waiter_holding_some_of_its_names_fails_when_its_session_expires_in_an_outage() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    let mut holder = holding(&server, &dir, &["--ttl", "2s"], "b");
    let ran = dir.file("waiter.ran");
    // Takes "a", then waits for "b": "a" goes with the expired session.
    let waiter = Watched::start(server.dlock(&[
        "run",
        "--ttl",
        "2s",
        "-w",
        "60s",
        "a",
        "b",
        "--",
        "sh",
        "-c",
        &format!("touch {}", ran.display()),
    ]));
    wait_until("the waiter to take a and queue for b", T, || {
        server.queue("/dlock/a").is_some_and(|c| c.len() == 1)
            && server.queue("/dlock/b").is_some_and(|c| c.len() == 2)
    });
    server.stop();
    let (code, stderr) = waiter.finish(T);
    // As before this change: whichever notices first, the lease of "a" (79) or the wait (69).
    assert!(code == 79 || code == 69, "{code}: {stderr}");
    assert!(!ran.exists(), "{stderr}");
    assert!(!stderr.contains("reached the backend again"), "{stderr}");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A server at its cap of connections from one host (`maxClientCnxns`; many runs queued on one
/// lock from one CI runner) is busy, not unreachable: the waiters past it wait for a connection
/// within their `--wait`, and one whose wait ends first exits 69 naming the cap.
#[test]
fn zookeeper_waiters_past_the_servers_cap_per_host_wait_for_a_connection() {
    // The holder and three waiters fill it; three more wait for a connection. ZooKeeper counts a
    // connection against the cap only once its selector takes it, after the accept that checks
    // the cap: waiters connecting together may all pass it. So the first three go one at a time,
    // each in line before the next starts; the other three then find the cap full. The connect
    // timeout leaves room for a session's first write (an fsync) on a loaded machine.
    let server = ZkServer::start_with_cap(4);
    let dir = LockDir::new();
    let mut holder = holding(&server, &dir, &["--ttl", "30s"], "cap");
    let waiter = || {
        Watched::start(server.dlock(&[
            "run",
            "--connect-timeout",
            "5s",
            "-w",
            "60s",
            "cap",
            "--",
            "true",
        ]))
    };
    let mut waiters: Vec<Watched> = Vec::new();
    for _ in 0..3 {
        let mut w = waiter();
        w.wait_for("waiting for lock", T);
        waiters.push(w);
    }
    let mut past: Vec<Watched> = (0..3).map(|_| waiter()).collect();
    // Past the cap, each says so (or, before the fix, ended with 69 after its connect timeout).
    wait_until("three waiters past the cap", T, || {
        past.iter_mut()
            .all(|w| w.has_said("maxClientCnxns") || w.child.try_wait().ok().flatten().is_some())
    });
    waiters.append(&mut past);
    let (code, stderr) = Watched::start(server.dlock(&[
        "run",
        "--connect-timeout",
        "2s",
        "-w",
        "3s",
        "cap",
        "--",
        "true",
    ]))
    .finish(T);
    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr.contains("maxClientCnxns"),
        "the cap is named:\n{stderr}"
    );
    std::fs::write(dir.file("h.go"), "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
    for waiter in waiters {
        let (code, stderr) = waiter.finish(T);
        assert_eq!(code, 0, "every waiter gets the lock in turn:\n{stderr}");
    }
}
