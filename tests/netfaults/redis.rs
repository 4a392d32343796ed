//! A Redis server down while a waiter waits or a holder renews, and the minimal ACL.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{hold, redis_at, T};
use crate::redis::server::RedisServer;
use crate::support::watched::Watched;
use crate::support::*;

/// A waiter waits through a server's restart, and gets the lock when its holder, whose connection
/// the restart broke, releases it on a new connection (not a whole lease later).
#[test]
fn a_redis_waiter_rides_out_an_outage_and_gets_the_lock() {
    let mut server = RedisServer::start_durable();
    let dir = LockDir::new();
    let url = server.url();
    let holder = Watched::start(redis_at(
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
    ));
    wait_for_file(&dir.file("h.in"), T);
    let mut waiter = Watched::start(redis_at(
        &url,
        &["-v", "run", "-w", "60s", "o", "--", "sh", "-c", "exit 7"],
    ));
    wait_until("the waiter to queue", T, || {
        server.keys().iter().any(|k| k.ends_with(":queue"))
    });
    // Its first round over: a server gone during it is one that cannot be used, and the waiter
    // exits 69 (seen when the server was killed between the queue entry and the round's answer).
    waiter.wait_for("waiting for lock \"o\"", T);
    server.kill();
    waiter.wait_for("; still waiting for lock \"o\"", T);
    // Down for a few seconds: longer than --connect-timeout, far shorter than --wait.
    std::thread::sleep(Duration::from_secs(6));
    server.restart_keeping_data();
    std::fs::write(dir.file("h.go"), "").unwrap();
    let (code, said) = holder.finish(T);
    assert_eq!(code, 0, "{said}");
    assert!(!said.contains("could not release"), "{said}");
    let released = Instant::now();
    let (code, stderr) = waiter.finish(T);
    assert_eq!(code, 7, "{stderr}");
    assert!(stderr.contains("cannot reach redis at"), "{stderr}");
    // Its next look, at its retry pace (2 s at most), not the holder's lease of 30 s.
    assert!(released.elapsed() < Duration::from_secs(15), "{stderr}");
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
            .any(|l| l.contains("cannot renew lock \"r\"")
                && !l.contains("cannot renew lock \"r\" for")),
        "{stderr}"
    );
}

/// The ACL the README gives for dlock's user.
pub(crate) const MINIMAL_ACL: &[&str] = &[
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

    // The weaker user is refused before it takes anything (what stays is the counters and the
    // last runs of the runs above).
    let before = server.keys();
    let out = output(redis_at(&weak, &["run", "a", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("may not run PUBLISH on dlock:wake:*"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert_eq!(server.keys(), before);
    assert!(
        before
            .iter()
            .all(|k| [":token", ":last-run", ":last-success"]
                .iter()
                .any(|e| k.ends_with(e))),
        "{before:?}"
    );
}
