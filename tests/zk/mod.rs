//! The ZooKeeper backend's own mechanism against real servers (one per test, started by
//! `ZkServer`): what is left in ZooKeeper, waiters queued in order, one watcher per waiter, losing
//! the lock when the server stops, keeping it when it restarts, a killed holder's session; ACLs,
//! chroots and bad URLs (access.rs), interop with Apache Curator (curator.rs) and kazoo, and what
//! dlock shows of nodes other clients and `--min-hold` leave (interop.rs), of other clients'
//! semaphores and of a Curator mutex beside a shared holder (semaphores.rs); the records of each
//! lock's last run and last success, read raw (last_run.rs). What every backend owes is in the
//! contract suite.
//!
//! Beside them, what the rest of the suite uses of ZooKeeper, in every build: its servers
//! (server.rs) and its description and targets (store.rs); and the other clients its own tests
//! run beside dlock (CuratorLock.java, kazoo_lock.py).

// Its tests are built with the zk feature only; without it, what they share goes unused.
#![cfg_attr(not(feature = "zk"), allow(dead_code, unused_imports))]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// What the rest of the suite uses of this store, in every build.
pub mod server;
pub mod store;

#[cfg(feature = "zk")]
mod access;
#[cfg(feature = "zk")]
mod curator;
#[cfg(feature = "zk")]
mod interop;
#[cfg(feature = "zk")]
mod last_run;
#[cfg(feature = "zk")]
mod semaphores;

use crate::support::relay::Relay;
use crate::support::stderr::Stderr;
use crate::zk::server::ZkServer;
use crate::zk::store::on_the_suites_server;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// A shell loop that waits (at most 30s) for `go` to appear: a child that holds the lock until the
/// test says so, without sleeping for a fixed time.
fn hold_until(go: &Path) -> String {
    format!(
        "i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        go = go.display()
    )
}

/// `dlock run [flags] NAME -- sh -c 'echo $DLOCK_TOKEN > in; <hold until go>'`, started in the
/// background; returns once the child runs (the lock is held).
fn start_holder(server: &ZkServer, dir: &LockDir, flags: &[&str], name: &str, tag: &str) -> Child {
    let marker = dir.file(&format!("{tag}.in"));
    let script = format!(
        "echo $DLOCK_TOKEN > {}; {}",
        marker.display(),
        hold_until(&dir.file(&format!("{tag}.go")))
    );
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    let mut child = server.dlock(&args).stderr(Stdio::piped()).spawn().unwrap();
    let end = Instant::now() + T;
    while !marker.exists() {
        let ended = child.try_wait().ok().flatten().is_some();
        if ended || Instant::now() >= end {
            // What kept it out, for the failure: the lock's nodes, and what dlock said.
            let nodes = lock_nodes(server, name);
            let _ = child.kill();
            let out = child.wait_with_output().expect("the holder's output");
            panic!(
                "{tag} did not get lock {name} (ended: {ended}); nodes {nodes:?}; its stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn let_go(dir: &LockDir, tag: &str) {
    std::fs::write(dir.file(&format!("{tag}.go")), "").unwrap();
}

fn token_of(dir: &LockDir, tag: &str) -> u64 {
    read_pid(&dir.file(&format!("{tag}.in"))) as u64
}

fn status_json(server: &ZkServer, name: &str) -> serde_json::Value {
    let out = output(server.dlock(&["status", "--json", name]));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// The lock directories under `root` (the records of past runs, in `.`-directories beside them,
/// stay).
fn lock_dirs(server: &ZkServer, root: &str) -> Option<Vec<String>> {
    let children = server.children(root)?;
    Some(
        children
            .into_iter()
            .filter(|c| !c.starts_with('.'))
            .collect(),
    )
}

/// The places in line for a lock (an exclusive holder's pair of nodes counts once).
fn lock_nodes(server: &ZkServer, dir_node: &str) -> Vec<String> {
    server
        .queue(&format!("/dlock/{dir_node}"))
        .unwrap_or_default()
}

#[cfg(feature = "zk")]
#[test]
fn a_run_leaves_no_node_behind_and_the_empty_lock_directory_goes() {
    let server = on_the_suites_server();
    let out = output(server.dlock(&["run", "env-test", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The holder's node is gone at once, and the server removes the emptied lock directory.
    assert_eq!(lock_nodes(&server, "env-test"), Vec::<String>::new());
    wait_until("the empty lock directory to go", T, || {
        lock_dirs(&server, "/dlock") == Some(vec![])
    });
    let out = output(server.dlock(&["status", "env-test"]));
    assert_eq!(code(&out), 1, "free: {}", stdout(&out));
}

/// What `contract::*::busy_lock_exits_75_*` cannot see: the refused attempts leave no node in the
/// lock's directory, and status names that directory.
#[cfg(feature = "zk")]
#[test]
fn refused_runs_leave_no_node_and_status_shows_the_lock_directory() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &[], "busy", "h");
    let out = output(server.dlock(&["run", "-n", "busy", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(server.dlock(&["run", "-n", "-E", "9", "busy", "--", "true"]));
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    let json = status_json(&server, "busy");
    assert_eq!(json["location"], format!("{}/dlock/busy", server.url()));
    assert_eq!(lock_nodes(&server, "busy").len(), 1);
    let_go(&dir, "h");
    assert!(wait_exit(&mut holder, T).success());
}

#[cfg(feature = "zk")]
#[test]
fn shared_holders_run_together_and_exclude_an_exclusive_one() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut r1 = start_holder(&server, &dir, &["--shared"], "rw", "r1");
    let mut r2 = start_holder(&server, &dir, &["--shared"], "rw", "r2");
    assert_eq!(
        status_json(&server, "rw")["holders"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let out = output(server.dlock(&["run", "-n", "rw", "--", "true"]));
    assert_eq!(code(&out), 75, "a writer waits for the readers");

    // A queued writer then holds back later readers (no writer starvation).
    let mut writer = server
        .dlock(&[
            "-v",
            "run",
            "rw",
            "--",
            "touch",
            dir.file("w.ran").to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Stderr::of(&mut writer).wait_for("waiting for lock");
    let out = output(server.dlock(&["run", "-n", "--shared", "rw", "--", "true"]));
    assert_eq!(code(&out), 75, "a reader queues behind the waiting writer");

    let_go(&dir, "r1");
    let_go(&dir, "r2");
    assert!(wait_exit(&mut r1, T).success());
    assert!(wait_exit(&mut r2, T).success());
    assert!(wait_exit(&mut writer, T).success());
    assert!(dir.file("w.ran").exists());
}

/// One figure from the server's `mntr` report.
fn mntr(server: &ZkServer, key: &str) -> u64 {
    let report = server.four_letter("mntr");
    report
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('\t')?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in mntr: {report}"))
}

#[cfg(feature = "zk")]
#[test]
fn each_release_wakes_only_the_next_waiter() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &[], "herd", "h");
    let waiters: Vec<Child> = (0..5)
        .map(|_| {
            server
                .dlock(&["run", "herd", "--", "true"])
                .spawn()
                .unwrap()
        })
        .collect();
    // The holder watches its own two nodes (its `lock-` node and the `__WRIT__` made with it);
    // each waiter watches the one node ahead of it.
    wait_until("five waiters watching", T, || {
        mntr(&server, "zk_watch_count") == 7
    });
    let_go(&dir, "h");
    assert!(wait_exit(&mut holder, T).success());
    for mut w in waiters {
        assert!(wait_exit(&mut w, T).success());
    }
    // Six deletions; the five that had a watcher each notified exactly one.
    assert_eq!(mntr(&server, "zk_cnt_node_deleted_watch_count"), 5);
    assert_eq!(mntr(&server, "zk_max_node_deleted_watch_count"), 1);
    assert_eq!(mntr(&server, "zk_sum_node_children_watch_count"), 0);
}

#[cfg(feature = "zk")]
#[test]
fn waiters_that_give_up_leave_no_node_behind() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &[], "giveup", "h");
    // Wait expired.
    let out = output(server.dlock(&["run", "--wait", "300ms", "giveup", "--", "true"]));
    assert_eq!(code(&out), 75);
    assert!(
        stderr(&out).contains("gave up on lock \"giveup\" after waiting 300ms"),
        "{}",
        stderr(&out)
    );
    assert_eq!(lock_nodes(&server, "giveup").len(), 1);
    // Signal while waiting.
    let mut waiter = server
        .dlock(&["-v", "run", "giveup", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Stderr::of(&mut waiter).wait_for("waiting for lock");
    assert_eq!(lock_nodes(&server, "giveup").len(), 2);
    signal(waiter.id(), libc::SIGINT);
    assert_eq!(wait_exit(&mut waiter, T).code(), Some(128 + libc::SIGINT));
    assert_eq!(lock_nodes(&server, "giveup").len(), 1);

    let_go(&dir, "h");
    assert!(wait_exit(&mut holder, T).success());
    assert_eq!(lock_nodes(&server, "giveup"), Vec::<String>::new());
    wait_until("the empty lock directory to go", T, || {
        lock_dirs(&server, "/dlock") == Some(vec![])
    });
}

#[cfg(feature = "zk")]
#[test]
fn names_with_slashes_and_dots_map_to_one_escaped_node_each() {
    let server = on_the_suites_server();
    for (name, node) in [
        ("../etc/x", "%2E.%2Fetc%2Fx"),
        ("a/b", "a%2Fb"),
        ("..", "%2E."),
        ("50%", "50%25"),
    ] {
        let out = output(server.dlock(&["run", name, "--", "sh", "-c", "echo $DLOCK_NAME"]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        assert_eq!(stdout(&out).trim(), name);
        let dir = LockDir::new();
        let mut holder = start_holder(&server, &dir, &[], name, "h");
        // The name is one directory holding the one node; earlier names' directories may linger
        // until the server removes them.
        assert!(
            server
                .children("/dlock")
                .unwrap()
                .contains(&node.to_owned()),
            "{name}"
        );
        assert_eq!(lock_nodes(&server, node).len(), 1, "{name}");
        let json = status_json(&server, name);
        assert_eq!(json["name"], name);
        let list = output(server.dlock(&["list", "--json"]));
        let list: serde_json::Value = serde_json::from_str(&stdout(&list)).unwrap();
        assert_eq!(list[0]["name"], name);
        let_go(&dir, "h");
        assert!(wait_exit(&mut holder, T).success());
    }
}

#[cfg(feature = "zk")]
#[test]
fn server_stopped_past_the_session_timeout_terminates_the_child_with_79() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let (marker, term) = (dir.file("in"), dir.file("term"));
    // The child notes when it is told to stop.
    let script = format!(
        "trap 'touch {term}; exit 1' TERM; touch {marker}; {}",
        hold_until(&dir.file("go")),
        term = term.display(),
        marker = marker.display()
    );
    let mut holder = server
        .dlock(&["run", "--ttl", "4s", "stopped", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let err = Stderr::of(&mut holder);
    let stopped_at = Instant::now();
    signal(server.pid(), libc::SIGSTOP);
    wait_for_file(&term, T);
    let took = stopped_at.elapsed();
    let status = wait_exit(&mut holder, T);
    let exited = stopped_at.elapsed();
    signal(server.pid(), libc::SIGCONT);
    assert_eq!(status.code(), Some(79), "{}", err.text());
    let expected = format!(
        "lost the lock: lock \"stopped\": cut off from ZooKeeper at {}",
        server.hosts()
    );
    assert!(err.text().contains(&expected), "{}", err.text());
    // dlock judges the lock lost by its own clock once the server may have expired the session (4s
    // after it last answered), not at once, and before the client library would call the session
    // expired (7/5 of the timeout, 5.6s); it then does not wait on the silent server to exit.
    assert!(took >= Duration::from_millis(2400), "{took:?}");
    assert!(took < Duration::from_millis(5400), "{took:?}");
    assert!(exited - took < Duration::from_secs(2), "{exited:?}");
}

#[cfg(feature = "zk")]
#[test]
fn server_restarted_within_the_session_timeout_keeps_the_lock() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    // A lease of 20 s: a ZooKeeper server's JVM, restarted beside the suite's other JVMs on two
    // cores, takes up to 10 s to serve again, and the session must outlast that.
    let mut holder = start_holder(&server, &dir, &["--ttl", "20s"], "survivor", "h");
    let err = Stderr::of(&mut holder);
    let down = Instant::now();
    server.restart();
    let restart_took = down.elapsed();
    // The session and its nodes were restored from the data directory, and dlock reconnected to
    // them (it watches both nodes of its pair).
    let watching = "1 connections watching 2 paths";
    let reconnected = holds_within(T, || server.four_letter("wchs").contains(watching));
    assert!(
        reconnected,
        "dlock did not watch its pair again within {T:?} of the restart (which took \
         {restart_took:?}): the server says {:?}; dlock said: {}",
        server.four_letter("wchs"),
        err.text()
    );
    assert_eq!(lock_nodes(&server, "survivor").len(), 1);
    let_go(&dir, "h");
    let status = wait_exit(&mut holder, T);
    assert_eq!(status.code(), Some(0), "no false loss: {}", err.text());
    assert!(!err.text().contains("lost"), "{}", err.text());
}

#[cfg(feature = "zk")]
#[test]
fn sigkill_of_the_holder_lets_the_next_waiter_in_within_the_session_timeout() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &["--ttl", "2s"], "killed", "h");
    let first = token_of(&dir, "h");
    let mut waiter = server
        .dlock(&[
            "-v",
            "run",
            "killed",
            "--",
            "sh",
            "-c",
            &format!("echo $DLOCK_TOKEN > {}", dir.file("w.in").display()),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Stderr::of(&mut waiter).wait_for("waiting for lock");
    let killed_at = Instant::now();
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    assert!(wait_exit(&mut waiter, T).success());
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the 2s session should have expired: {took:?}"
    );
    assert!(
        token_of(&dir, "w") > first,
        "tokens keep increasing after a crash"
    );
}

/// Under `-q` nobody sees who holds the lock waited for, so the waiter does not read the holders'
/// nodes (a request each); without `-q` it does. Counted as what the waiter sends the server,
/// through a relay of its own: the same wait, less the reads.
#[cfg(feature = "zk")]
#[test]
fn a_quiet_waiter_never_reads_who_holds_the_lock() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let mut sent = Vec::new();
    for (tag, flags) in [("quiet", &["-q"][..]), ("loud", &[][..])] {
        let relay = Relay::start(([127, 0, 0, 1], server.port()).into());
        let url = format!("zk://127.0.0.1:{}", relay.port());
        let held = format!("{tag}-h");
        let mut holder = start_holder(&server, &dir, &[], "q", &held);
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["q", "--", "true"]);
        let mut waiter = server.dlock_at(&url, &args).spawn().unwrap();
        // The holder watches its own two nodes, the waiter the one ahead.
        wait_until("the waiter in line", T, || {
            mntr(&server, "zk_watch_count") == 3
        });
        let_go(&dir, &held);
        assert!(wait_exit(&mut holder, T).success());
        assert!(wait_exit(&mut waiter, T).success());
        sent.push(relay.bytes_sent_up());
    }
    assert!(
        sent[0] < sent[1],
        "bytes sent by the quiet and the loud waiter: {sent:?}"
    );
}
