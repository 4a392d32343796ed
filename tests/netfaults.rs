//! Network faults on the Redis and ZooKeeper backends: a server down while a waiter waits or a
//! holder renews, servers that accept and never answer, answer slowly or speak something else, and
//! Redis ACL users without the permissions dlock needs.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::redis_server::{dlock_at, RedisServer};
use crate::support::watched::Watched;
use crate::support::zk_server::ZkServer;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

fn redis_at(url: &str, args: &[&str]) -> Command {
    dlock_at(&[url], args)
}

/// A shell command that writes `in` then holds until `go` exists (at most 60s).
fn hold(dir: &LockDir, tag: &str) -> String {
    format!(
        "touch {inside}; i=0; while [ ! -e {go} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        inside = dir.file(&format!("{tag}.in")).display(),
        go = dir.file(&format!("{tag}.go")).display()
    )
}

#[test]
fn a_redis_waiter_rides_out_an_outage_and_gets_the_lock() {
    let mut server = RedisServer::start_durable();
    let dir = LockDir::new();
    let url = server.url();
    let holder = redis_at(
        &url,
        &[
            "run",
            "--ttl",
            "30s",
            "o",
            "--",
            "sh",
            "-c",
            &hold(&dir, "h"),
        ],
    )
    .spawn()
    .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = Watched::start(redis_at(
        &url,
        &["run", "-w", "60s", "o", "--", "sh", "-c", "exit 7"],
    ));
    wait_until("the waiter to queue", T, || {
        server.keys().iter().any(|k| k.ends_with(":queue"))
    });
    server.kill();
    waiter.wait_for("; still waiting for lock \"o\"", T);
    // Down for a few seconds: longer than --connect-timeout, far shorter than --wait.
    std::thread::sleep(Duration::from_secs(6));
    server.restart_keeping_data();
    std::fs::write(dir.file("h.go"), "").unwrap();
    let mut holder = holder;
    assert!(wait_exit(&mut holder, T).success());
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 7, "{stderr}");
    assert!(stderr.contains("cannot reach redis at"), "{stderr}");
}

#[test]
fn a_redis_waiter_gives_up_with_75_when_its_wait_ends_during_an_outage() {
    let mut server = RedisServer::start();
    let dir = LockDir::new();
    let url = server.url();
    let mut holder = redis_at(&url, &["run", "g", "--", "sh", "-c", &hold(&dir, "h")])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = Watched::start(redis_at(&url, &["run", "-w", "3s", "g", "--", "true"]));
    wait_until("the waiter to queue", T, || {
        server.keys().iter().any(|k| k.ends_with(":queue"))
    });
    server.kill();
    let stopped = Instant::now();
    waiter.wait_for("still waiting", T);
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 75, "{stderr}");
    assert!(stopped.elapsed() < Duration::from_secs(5), "{stderr}");
    std::fs::write(dir.file("h.go"), "").unwrap();
    let _ = wait_exit(&mut holder, T);
}

#[test]
fn failed_redis_renewals_are_not_logged_as_renewed_and_are_warned_about() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let mut holder = Watched::start(redis_at(
        &server.url(),
        &[
            "-v",
            "run",
            "--ttl",
            "3s",
            "--kill-after",
            "1s",
            "r",
            "--",
            "sh",
            "-c",
            &hold(&dir, "h"),
        ],
    ));
    holder.wait_for("renewed \"r\"", T);
    server.pause();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        holder.wait_for("lost the lock", T);
        holder.finish(T)
    }));
    server.resume();
    let (code, stderr) = result.unwrap_or_else(|p| std::panic::resume_unwind(p));
    assert_eq!(code, 79, "{stderr}");
    let after_pause: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.contains("renewed \"r\""))
        .skip(1)
        .collect();
    assert!(
        !after_pause.iter().any(|l| l.contains("renewed \"r\"")),
        "a failed renewal was logged as renewed:\n{stderr}"
    );
    assert!(
        after_pause
            .iter()
            .any(|l| l.contains("could not renew \"r\"") && l.contains("more")),
        "{stderr}"
    );
    assert!(
        after_pause
            .iter()
            .any(|l| l.contains("cannot renew lock \"r\"")),
        "{stderr}"
    );
}

/// A listener that accepts connections and never answers; kept open while the value lives.
fn silent_server() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Starts `cmd`, sends `signal` once it has connected to `listener`, and checks it ends at once
/// with 128+N.
fn ends_at_once_on(signal: i32, listener: &TcpListener, mut cmd: Command) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let (_conn, _) = listener.accept().unwrap();
    // Connected: now in the middle of the exchange with a server that never answers.
    std::thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    signal_pid(child.id(), signal);
    let status = wait_exit(&mut child, T);
    let took = sent.elapsed();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(status.code(), Some(128 + signal), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}: {err}");
}

fn signal_pid(pid: u32, sig: i32) {
    signal(pid, sig);
}

#[test]
fn signals_end_a_connection_to_a_silent_redis_or_zookeeper_at_once() {
    let (listener, port) = silent_server();
    let url = format!("redis://127.0.0.1:{port}");
    for sig in [libc::SIGTERM, libc::SIGINT] {
        ends_at_once_on(
            sig,
            &listener,
            redis_at(
                &url,
                &["--connect-timeout", "20s", "run", "s", "--", "true"],
            ),
        );
    }
    let mut cmd = dlock();
    cmd.args([
        "--backend",
        "zk",
        "--url",
        &format!("zk://127.0.0.1:{port}"),
    ])
    .args(["--connect-timeout", "20s", "run", "s", "--", "true"]);
    ends_at_once_on(libc::SIGTERM, &listener, cmd);
}

/// A server that answers every connection with `answer`, `pace` apart per byte.
fn fake_server(answer: &'static [u8], pace: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(20) {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                for b in answer.iter().cycle().take(4000) {
                    if conn.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(pace);
                }
            });
        }
    });
    port
}

#[test]
fn one_connect_timeout_bounds_connecting_and_the_first_answer() {
    let (_listener, silent) = silent_server();
    // Valid RESP, one byte every 300ms: each read is quick, the whole answer is not.
    let drip = fake_server(b"*2\r\n:0\r\n$1\r\nx\r\n", Duration::from_millis(300));
    let redis = RedisServer::start();
    let tls_to_plain = format!("rediss://127.0.0.1:{}", redis.port());
    for url in [
        format!("redis://127.0.0.1:{silent}"),
        format!("redis://127.0.0.1:{drip}"),
        tls_to_plain,
    ] {
        let started = Instant::now();
        let out = output(redis_at(
            &url,
            &["--connect-timeout", "2s", "run", "b", "--", "true"],
        ));
        let took = started.elapsed();
        assert_eq!(code(&out), 69, "{url}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert!(
            took < Duration::from_millis(3000),
            "{url} took {took:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_server_that_is_not_redis_is_named_in_one_line() {
    let port = fake_server(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        Duration::ZERO,
    );
    let out = output(redis_at(
        &format!("redis://127.0.0.1:{port}"),
        &["run", "h", "--", "true"],
    ));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        format!("dlock: the server at 127.0.0.1:{port} does not speak the Redis protocol")
    );
}

/// The ACL the README gives for dlock's user.
const MINIMAL_ACL: &[&str] = &[
    "~dlock:*",
    "&dlock:wake:*",
    "+evalsha",
    "+eval",
    "+script|load",
    "+hello",
    "+subscribe",
    "+scan",
    "+publish",
    "+time",
    "+get",
    "+set",
    "+del",
    "+incr",
    "+pexpire",
    "+pttl",
    "+hset",
    "+hget",
    "+hmget",
    "+hdel",
    "+zadd",
    "+zrem",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zscore",
    "+zrank",
    "+zcard",
    "+zcount",
];

#[test]
fn the_minimal_redis_acl_works_and_a_weaker_one_is_refused_before_acquiring() {
    let mut args = vec!["--user", "dlock", "on", ">pw"];
    args.extend_from_slice(MINIMAL_ACL);
    args.extend_from_slice(&["--user", "weak", "on", ">pw", "~dlock:*", "&dlock:wake:*"]);
    args.extend(MINIMAL_ACL.iter().filter(|p| **p != "+publish"));
    let server = RedisServer::start_with(&args);
    let port = server.port();
    let dir = LockDir::new();
    let minimal = format!("redis://dlock:pw@127.0.0.1:{port}");
    let weak = format!("redis://weak:pw@127.0.0.1:{port}");

    // Acquire, wait, hand over, status, list and release --force as the minimal user.
    let holder = redis_at(&minimal, &["run", "a", "--", "sh", "-c", &hold(&dir, "h")])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let waiter = redis_at(&minimal, &["run", "a", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the waiter to queue", T, || {
        server.keys().iter().any(|k| k.ends_with(":queue"))
    });
    for args in [&["status", "a"][..], &["list"][..]] {
        let out = output(redis_at(&minimal, args));
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    }
    std::fs::write(dir.file("h.go"), "").unwrap();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut holder = holder;
    assert!(wait_exit(&mut holder, T).success());

    // The weaker user is refused before it takes anything.
    let out = output(redis_at(&weak, &["run", "a", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("may not run PUBLISH on dlock:wake:*"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(
        server.keys().iter().all(|k| k.ends_with(":token")),
        "{:?}",
        server.keys()
    );
}

#[test]
fn a_zookeeper_waiter_reports_an_outage_and_still_gets_the_lock() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    let holder = server
        .dlock(&[
            "run",
            "--ttl",
            "30s",
            "z",
            "--",
            "sh",
            "-c",
            &hold(&dir, "h"),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = Watched::start(server.dlock(&[
        "-v", "run", "--ttl", "30s", "-w", "60s", "z", "--", "sh", "-c", "exit 7",
    ]));
    wait_until("the waiter to queue", T, || {
        server.children("/dlock/z").is_some_and(|c| c.len() == 2)
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
    let mut holder = server
        .dlock(&["run", "z", "--", "sh", "-c", &hold(&dir, "h")])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = Watched::start(server.dlock(&["run", "-w", "3s", "z", "--", "true"]));
    wait_until("the waiter to queue", T, || {
        server.children("/dlock/z").is_some_and(|c| c.len() == 2)
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
    let mut holder = server
        .dlock(&[
            "run",
            "--ttl",
            "2s",
            "z",
            "--",
            "sh",
            "-c",
            &hold(&dir, "h"),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
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
        server.children("/dlock/z").is_some_and(|c| c.len() == 2)
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
    let mut holder = server
        .dlock(&[
            "run",
            "--ttl",
            "2s",
            "z",
            "--",
            "sh",
            "-c",
            &hold(&dir, "h"),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
    let waiter =
        Watched::start(server.dlock(&["run", "--ttl", "2s", "-w", "8s", "z", "--", "true"]));
    wait_until("the waiter to queue", T, || {
        server.children("/dlock/z").is_some_and(|c| c.len() == 2)
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
    let mut holder = server
        .dlock(&[
            "run",
            "--ttl",
            "2s",
            "b",
            "--",
            "sh",
            "-c",
            &hold(&dir, "h"),
        ])
        .spawn()
        .unwrap();
    wait_for_file(&dir.file("h.in"), T);
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
        server.children("/dlock/a").is_some_and(|c| c.len() == 1)
            && server.children("/dlock/b").is_some_and(|c| c.len() == 2)
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
