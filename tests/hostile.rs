//! Hostile input that one backend's own mechanism meets: Redis fencing counters set to anything,
//! and passwords in every shape of URL. dlock must never panic, never hand out a repeated token,
//! and never print a password. Forged holder records, a closed output pipe, names outside the
//! Basic Multilingual Plane and leases longer than the servers can count are met by every
//! backend: `contract/hostile.rs` and `contract/exit_codes.rs`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis::server::RedisServer;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// `dlock run NAME -- <hold until go>` in the background; returns once the command runs.
fn hold(dlock: &dyn Fn(&[&str]) -> Command, dir: &LockDir, name: &str) -> Child {
    let marker = dir.file("in");
    let go = dir.file("go");
    let script = format!(
        "touch {}; i=0; while [ ! -e {} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        marker.display(),
        go.display()
    );
    let child = dlock(&["run", "--ttl", "3s", name, "--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .expect("start a holder");
    wait_for_file(&marker, T);
    child
}

fn let_go(dir: &LockDir, mut holder: Child) {
    std::fs::write(dir.file("go"), "").unwrap();
    wait_exit(&mut holder, T);
}

fn counter(conn: &mut redis::Connection, name: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(format!("dlock:{{{name}}}:token"))
        .query(conn)
        .unwrap()
}

#[test]
fn a_redis_counter_that_is_no_token_is_refused_and_left_as_it_is() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    for bad in [
        "-1",
        "garbage",
        "1.5",
        " 7",
        "9007199254740991",
        "9007199254740992",
        "18446744073709551615",
    ] {
        redis::cmd("SET")
            .arg("dlock:{n}:token")
            .arg(bad)
            .query::<()>(&mut conn)
            .unwrap();
        let out = output(server.dlock(&["run", "n", "--", "true"]));
        assert_eq!(code(&out), 69, "{bad}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("fencing counter dlock:{n}:token") && err.lines().count() == 1,
            "{bad}: {err}"
        );
        assert_eq!(counter(&mut conn, "n").as_deref(), Some(bad), "{bad}");
    }
    // The last token that stays exact is handed out once, and then no other.
    redis::cmd("SET")
        .arg("dlock:{n}:token")
        .arg("9007199254740990")
        .query::<()>(&mut conn)
        .unwrap();
    let out = output(server.dlock(&["run", "n", "--", "sh", "-c", "echo $DLOCK_TOKEN"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "9007199254740991");
    let out = output(server.dlock(&["run", "n", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(counter(&mut conn, "n").as_deref(), Some("9007199254740991"));
}

#[test]
fn a_release_grants_nothing_from_a_broken_redis_counter() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let mut conn = server.connection();
    let holder = hold(&|args| server.dlock(args), &dir, "n");
    let mut waiter = server
        .dlock(&["run", "--ttl", "3s", "n", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the waiter in line", T, || {
        redis::cmd("ZCARD")
            .arg("dlock:{n}:queue")
            .query::<u64>(&mut conn)
            .unwrap()
            == 1
    });
    redis::cmd("SET")
        .arg("dlock:{n}:token")
        .arg("-1")
        .query::<()>(&mut conn)
        .unwrap();
    let_go(&dir, holder);
    let status = wait_exit(&mut waiter, T);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut waiter.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(69), "{err}");
    assert!(err.contains("fencing counter dlock:{n}:token"), "{err}");
    assert_eq!(counter(&mut conn, "n").as_deref(), Some("-1"));
    let holders: u64 = redis::cmd("ZCARD")
        .arg("dlock:{n}:holders")
        .query(&mut conn)
        .unwrap();
    assert_eq!(holders, 0, "nothing was granted");
}

#[test]
fn redlock_refuses_a_broken_counter_on_any_server() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut broken = servers[1].connection();
    redis::cmd("SET")
        .arg("dlock:{n}:token")
        .arg("garbage")
        .query::<()>(&mut broken)
        .unwrap();
    let mut cmd = dlock();
    cmd.args(["--backend", "redis"]);
    for s in &servers {
        cmd.args(["--url", &s.url()]);
    }
    let out = output({
        cmd.args(["run", "n", "--", "true"]);
        cmd
    });
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("fencing counter dlock:{n}:token"),
        "{}",
        stderr(&out)
    );
    assert_eq!(counter(&mut broken, "n").as_deref(), Some("garbage"));
}

#[test]
fn no_message_shows_a_password_whatever_the_url_shape() {
    // Nothing listens on port 1: unreachable at once.
    for (backend, url, status) in [
        ("zk", "zk://alice:PA/SECRET1@127.0.0.1:1", 69),
        ("zk", "zk://SECRET@127.0.0.1:1", 64),
        ("zk", "zk://alice:SECRET@127.0.0.1:1?x", 64),
        ("redis", "redis+unix:///x?pass=SECRET", 64),
        ("redis", "unix:///run/redis.sock?user=a&pass=SECRET", 64),
        ("redis", "redis://u:SECRET@127.0.0.1:1", 69),
        ("redis", "redis://u:PA/SECRET@127.0.0.1:1", 64),
        ("redis", "redis://:SECRET@127.0.0.1:notaport", 64),
        ("file", "redis://u:SECRET@db:6379", 64),
        ("file", "file://SECRET@host/x", 64),
    ] {
        for args in [&["status", "x"][..], &["run", "x", "--", "true"]] {
            let out = output({
                let mut cmd = dlock();
                cmd.args([
                    "--backend",
                    backend,
                    "--url",
                    url,
                    "--connect-timeout",
                    "300ms",
                ])
                .args(args);
                cmd
            });
            let all = format!("{}{}", stdout(&out), stderr(&out));
            assert_eq!(code(&out), status, "{url} {args:?}: {all}");
            assert!(!all.contains("SECRET"), "{url} {args:?}: {all}");
            assert!(all.starts_with("dlock: "), "{url} {args:?}: {all}");
        }
    }
}
