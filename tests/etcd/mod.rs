//! The etcd backend against a real etcd (one shared by the tests of a run, each test with its own
//! lock names; a private one for tests that stop the server or count its events): modes, tokens,
//! first come first served with one wake-up per release, losing the lock, status/list/release
//! --force, hostile keys; interop with `etcdctl lock` both ways (interop.rs); passwords, bad
//! addresses, every endpoint tried, what a busy try leaves, a restart (access.rs); the records of
//! each lock's last run and last success, read raw (last_run.rs).
//!
//! Beside them, what the rest of the suite uses of etcd: its servers (server.rs; fake_server.rs, a
//! fake one for the network faults, with the feature) and its description and targets (store.rs).

// Its tests are built with the etcd feature only; without it, what they share goes unused.
#![cfg_attr(not(feature = "etcd"), allow(dead_code, unused_imports))]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// What the rest of the suite uses of this store, in every build.
#[cfg(feature = "etcd")]
pub mod fake_server;
pub mod server;
pub mod store;

#[cfg(feature = "etcd")]
mod access;
#[cfg(feature = "etcd")]
mod interop;
#[cfg(feature = "etcd")]
mod last_run;
#[cfg(feature = "etcd")]
mod secure;

use crate::etcd::server::EtcdServer;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn shared() -> &'static EtcdServer {
    EtcdServer::shared()
}

/// `dlock --backend etcd --url <server> ARGS`.
fn on(server: &EtcdServer, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "etcd", "--url", &server.url()])
        .args(args);
    cmd
}

/// `dlock --backend etcd --url URL ARGS`.
fn at(url: &str, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "etcd", "--url", url]).args(args);
    cmd
}

/// A shell loop that waits (at most 30s) for `go` to appear.
fn hold_until(go: &Path) -> String {
    format!(
        "i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        go = go.display()
    )
}

/// `dlock run [flags] NAME -- sh -c 'echo $DLOCK_TOKEN > TAG.in; <hold until TAG.go>'`, in the
/// background; returns once the child runs (the lock is held).
fn start_holder(
    server: &EtcdServer,
    dir: &LockDir,
    flags: &[&str],
    name: &str,
    tag: &str,
) -> Child {
    let child = spawn_holder(server, dir, flags, name, tag);
    wait_for_file(&dir.file(&format!("{tag}.in")), T);
    child
}

/// As `start_holder`, without waiting for the lock.
fn spawn_holder(
    server: &EtcdServer,
    dir: &LockDir,
    flags: &[&str],
    name: &str,
    tag: &str,
) -> Child {
    let script = format!(
        "echo $DLOCK_TOKEN > {in_}.tmp && mv {in_}.tmp {in_}; echo {tag} >> {order}; {hold}",
        in_ = dir.file(&format!("{tag}.in")).display(),
        order = dir.file("order").display(),
        hold = hold_until(&dir.file(&format!("{tag}.go")))
    );
    let mut args = vec!["run"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    on(server, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn let_go(dir: &LockDir, tag: &str) {
    std::fs::write(dir.file(&format!("{tag}.go")), "").unwrap();
}

fn token_of(dir: &LockDir, tag: &str) -> u64 {
    read_pid(&dir.file(&format!("{tag}.in"))) as u64
}

fn is_in(dir: &LockDir, tag: &str) -> bool {
    dir.file(&format!("{tag}.in")).exists()
}

/// Waits until the lock's prefix holds `n` keys (holders and waiters).
fn wait_for_keys(server: &EtcdServer, name: &str, n: usize) {
    let prefix = format!("/dlock/{name}/");
    wait_until(&format!("{n} keys under {prefix}"), T, || {
        server.keys(&prefix) == n
    });
}

fn exit_code(child: &mut Child) -> i32 {
    wait_exit(child, T).code().expect("exit code")
}

#[cfg(feature = "etcd")]
#[test]
fn shared_holders_run_together_and_limit_admits_n() {
    let server = shared();
    let dir = LockDir::new();
    let mut r1 = start_holder(server, &dir, &["--shared"], "rw", "r1");
    let mut r2 = start_holder(server, &dir, &["--shared"], "rw", "r2");
    let out = output(on(server, &["run", "-n", "rw", "--", "true"]));
    assert_eq!(code(&out), 75, "an exclusive holder beside shared ones");
    let mut a = start_holder(server, &dir, &["--limit", "2"], "pool", "a");
    let mut b = start_holder(server, &dir, &["--limit", "2"], "pool", "b");
    let out = output(on(
        server,
        &["run", "-n", "--limit", "2", "pool", "--", "true"],
    ));
    assert_eq!(code(&out), 75, "a third seat of two: {}", stderr(&out));
    let out = output(on(server, &["run", "-n", "--shared", "pool", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "shared holders take no seat: {}",
        stderr(&out)
    );
    // A seat waiter gets in when either seat is given up.
    let mut c = spawn_holder(server, &dir, &["--limit", "2"], "pool", "c");
    wait_for_keys(server, "pool", 3);
    let_go(&dir, "b");
    wait_for_file(&dir.file("c.in"), T);
    for (child, tag) in [
        (&mut r1, "r1"),
        (&mut r2, "r2"),
        (&mut a, "a"),
        (&mut b, "b"),
        (&mut c, "c"),
    ] {
        let_go(&dir, tag);
        assert_eq!(exit_code(child), 0, "{tag}");
    }
    // Nothing is left behind, busy attempts included.
    wait_for_keys(server, "rw", 0);
    wait_for_keys(server, "pool", 0);
}

#[cfg(feature = "etcd")]
#[test]
fn tokens_are_create_revisions_and_grow() {
    let server = shared();
    let dir = LockDir::new();
    let mut last = 0;
    for i in 0..3 {
        let tag = format!("t{i}");
        let mut holder = start_holder(server, &dir, &[], "tokens", &tag);
        let token = token_of(&dir, &tag);
        let out = server
            .etcdctl(&["get", "--prefix", "/dlock/tokens/", "-w", "json"])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["kvs"][0]["create_revision"].as_u64(), Some(token));
        assert!(token > last, "{token} after {last}");
        last = token;
        let_go(&dir, &tag);
        assert_eq!(exit_code(&mut holder), 0);
    }
}

#[cfg(feature = "etcd")]
#[test]
fn waiters_are_served_in_arrival_order_with_one_wake_up_per_release() {
    // A private server: the events metric counts every watcher's events.
    let server = EtcdServer::start();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &[], "fifo", "h");
    let mut waiters = Vec::new();
    for i in 0..4 {
        let tag = format!("w{i}");
        waiters.push((spawn_holder(&server, &dir, &[], "fifo", &tag), tag));
        wait_for_keys(&server, "fifo", i + 2);
    }
    let before = server.events_sent();
    let_go(&dir, "h");
    assert_eq!(exit_code(&mut holder), 0);
    for (i, (child, tag)) in waiters.iter_mut().enumerate() {
        wait_for_file(&dir.file(&format!("{tag}.in")), T);
        // One release, one event: only the waiter just behind was told.
        assert_eq!(
            server.events_sent() - before,
            i as u64 + 1,
            "after {tag} came in"
        );
        let_go(&dir, tag);
        assert_eq!(exit_code(child), 0);
    }
    let order = std::fs::read_to_string(dir.file("order")).unwrap();
    assert_eq!(
        order.split_whitespace().collect::<Vec<_>>(),
        ["h", "w0", "w1", "w2", "w3"]
    );
}

/// The lease id of the lock NAME's only key, in hex (as etcdctl takes it).
fn lease_of(server: &EtcdServer, name: &str) -> String {
    let out = server
        .etcdctl(&["get", "--prefix", &format!("/dlock/{name}/"), "-w", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    format!("{:x}", json["kvs"][0]["lease"].as_u64().expect("a lease"))
}

#[cfg(feature = "etcd")]
#[test]
fn a_revoked_lease_or_a_deleted_key_terminates_the_command_with_79() {
    let server = shared();
    let dir = LockDir::new();
    for (name, how) in [("lost-revoked", "revoke"), ("lost-deleted", "delete")] {
        let mut holder = start_holder(server, &dir, &["--ttl", "3s"], name, name);
        let done = match how {
            "revoke" => server
                .etcdctl(&["lease", "revoke", &lease_of(server, name)])
                .output()
                .unwrap(),
            _ => server
                .etcdctl(&["del", "--prefix", &format!("/dlock/{name}/")])
                .output()
                .unwrap(),
        };
        assert!(done.status.success(), "{}", stderr(&done));
        let lost_at = Instant::now();
        let status = wait_exit(&mut holder, T);
        // Found at a renewal (every second with --ttl 3s), not when the command ends by itself
        // (after 30s).
        assert!(
            lost_at.elapsed() < Duration::from_secs(15),
            "{how}: {:?}",
            lost_at.elapsed()
        );
        let mut err = String::new();
        holder
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(79), "{how}: {err}");
        assert!(err.contains("lost"), "{how}: {err}");
    }
}

#[cfg(feature = "etcd")]
#[test]
fn release_force_breaks_the_lock_and_its_holder_exits_79() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &["--ttl", "3s"], "broken", "b");
    let out = output(on(server, &["release", "broken"]));
    assert_eq!(code(&out), 1, "no hold of this shell's without --force");
    let out = output(on(server, &["release", "--force", "broken"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(exit_code(&mut holder), 79);
    let out = output(on(server, &["status", "broken"]));
    assert_eq!(code(&out), 1, "free: {}", stdout(&out));
}

#[cfg(feature = "etcd")]
#[test]
fn status_and_list_show_holder_records_as_json() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &[], "records/a b", "r");
    let token = token_of(&dir, "r");
    let out = output(on(server, &["status", "--json", "records/a b"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let h = &json["holders"][0];
    assert_eq!(h["mode"], "exclusive");
    assert_eq!(h["token"].as_u64(), Some(token));
    assert_eq!(h["pid"].as_u64(), Some(u64::from(holder.id())));
    assert!(h["host"].is_string() && h["since"].is_string(), "{json}");
    assert_eq!(h["owner"].as_str().map(str::len), Some(32), "{json}");
    assert_eq!(
        json["location"].as_str().unwrap(),
        format!("{}/dlock/records%2Fa%20b/", server.url())
    );
    let out = output(on(server, &["list", "--json", "records/"]));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["name"], "records/a b", "{listed}");
    assert_eq!(listed[0]["holders"][0]["token"].as_u64(), Some(token));
    let_go(&dir, "r");
    assert_eq!(exit_code(&mut holder), 0);
}

#[cfg(feature = "etcd")]
#[test]
fn hostile_keys_are_unreadable_holders_never_a_panic() {
    let server = shared();
    let garbage = "\u{1b}[2Jnot a record";
    for (key, value) in [
        ("/dlock/hostile/forged", garbage),
        ("/dlock/hostile/x", "zz exclusive 1 99999999999999 1 h"),
        ("/dlock/no-lock-here", "x"),
    ] {
        let out = server.etcdctl(&["put", key, value]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = output(on(server, &["status", "hostile"]));
    let text = stdout(&out) + &stderr(&out);
    assert_eq!(code(&out), 0, "a forged key holds the lock: {text}");
    assert!(text.contains("unreadable"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    let out = output(on(server, &["run", "-n", "hostile", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let out = output(on(server, &["list", "hostile"]));
    assert!(!stderr(&out).contains("panick"), "{}", stderr(&out));
    let out = output(on(server, &["list"]));
    assert!(stderr(&out).contains("no-lock-here"), "{}", stderr(&out));
    for key in ["/dlock/hostile/", "/dlock/no-lock-here"] {
        server.etcdctl(&["del", "--prefix", key]).output().unwrap();
    }
}

/// Under `-q` nobody sees who holds the lock waited for, so a waiter behind shared holders (the
/// line ahead does not name them all) does not ask the server for them; without `-q` it does.
#[cfg(feature = "etcd")]
#[test]
fn a_quiet_waiter_never_reads_who_holds_the_lock() {
    // A private server: the call counts are every client's. Long leases: no renewal (a read)
    // falls within the test.
    let server = EtcdServer::start();
    let dir = LockDir::new();
    let mut reads = Vec::new();
    for (tag, flags) in [
        ("quiet", &["-q", "--ttl", "60s"][..]),
        ("loud", &["--ttl", "60s"][..]),
    ] {
        let held = format!("{tag}-h");
        let mut holder = start_holder(&server, &dir, &["--shared", "--ttl", "60s"], tag, &held);
        let before = server.calls_served("Range");
        let txns = server.calls_served("Txn");
        let mut waiter = spawn_holder(&server, &dir, flags, tag, tag);
        // In line (its place is a transaction), and not let in before the holder goes.
        wait_until("the waiter in line", T, || {
            server.calls_served("Txn") > txns
        });
        let_go(&dir, &held);
        assert_eq!(exit_code(&mut holder), 0);
        wait_for_file(&dir.file(&format!("{tag}.in")), T);
        let_go(&dir, tag);
        assert_eq!(exit_code(&mut waiter), 0);
        reads.push(server.calls_served("Range") - before);
    }
    assert!(
        reads[0] < reads[1],
        "reads of the quiet and the loud waiter: {reads:?}"
    );
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_pointed_at_a_redis_port_says_it_is_not_etcd_there() {
    let redis = crate::redis::server::RedisServer::start();
    let url = format!("etcd://127.0.0.1:{}", redis.port());
    let out = output_within(
        at(&url, &["run", "x", "--", "true"]),
        Duration::from_secs(30),
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 69, "{err}");
    assert!(err.contains("does not answer as etcd does"), "{err}");
    assert!(!err.contains("h2") && !err.contains("http2 error"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
