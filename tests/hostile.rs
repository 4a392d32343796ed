//! Hostile input through the real binary: holder records that other clients forged (out of range,
//! with control characters) on every backend, fencing counters set to anything on Redis, output into
//! a closed pipe, names ZooKeeper would refuse, passwords in every shape of URL, and leases longer
//! than the servers can count. dlock must never panic, never hand out a repeated token, and never
//! print a password.

use std::os::unix::fs::FileExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::redis_server::RedisServer;
use crate::support::zk_server::ZkServer;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// A holder record with a time humantime cannot print (past the year 9999).
const FAR_FUTURE: &str = "exclusive 5 99999999999999 2 host";

/// `status`, `status --json`, `list`, `list --json`, `run -n` and `release --force` on a lock whose
/// only holder's record is forged: each exits as it would for any holder (held, listed, busy,
/// released) and shows the record as unreadable, `shown` being what it shows of it.
fn shows_unreadable(dlock: impl Fn(&[&str]) -> Command, name: &str, shown: &str) {
    let out = output(dlock(&["status", name]));
    assert_eq!(code(&out), 0, "status: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("(unreadable record \"{shown}\")")),
        "{text}"
    );

    let out = output(dlock(&["status", "--json", name]));
    assert_eq!(code(&out), 0, "status --json: {}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    let holder = &json["holders"][0];
    assert_eq!(holder["unreadable"], shown, "{json}");
    assert_eq!(holder["mode"], "exclusive", "{json}");
    for unknown in ["since", "token", "pid", "host"] {
        assert!(holder[unknown].is_null(), "{unknown} in {json}");
    }

    let out = output(dlock(&["list"]));
    assert_eq!(code(&out), 0, "list: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{name}\texclusive (unreadable record")),
        "{}",
        stdout(&out)
    );

    let out = output(dlock(&["list", "--json"]));
    assert_eq!(code(&out), 0, "list --json: {}", stderr(&out));
    let all: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("list JSON");
    assert_eq!(all[0]["name"], name, "{all}");
    assert_eq!(all[0]["holders"][0]["unreadable"], shown, "{all}");

    // Never admitted on a record it cannot read: busy.
    let out = output(dlock(&["run", "-n", name, "--", "true"]));
    assert_eq!(code(&out), 75, "run -n: {}", stderr(&out));
    assert!(
        stderr(&out).contains("unreadable record"),
        "{}",
        stderr(&out)
    );

    let out = output(dlock(&["release", "--force", name]));
    assert_eq!(code(&out), 0, "release --force: {}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("released {name}\texclusive (unreadable record")),
        "{}",
        stdout(&out)
    );
    let out = output(dlock(&["status", name]));
    assert_eq!(code(&out), 1, "released: {}", stdout(&out));
}

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

#[test]
fn a_forged_file_record_is_unreadable_and_the_lock_stays_busy() {
    let dir = LockDir::new();
    let locks = LockDir::new();
    let dlock = |args: &[&str]| locks.dlock(args);
    let holder = hold(&dlock, &dir, "x");
    // Overwrite the live holder's record slot (it keeps its OFD lock on it): as any user who can
    // open the lock file could, and with a terminal escape in the host for good measure.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(locks.file("x.lock"))
        .unwrap();
    let mut slot = format!("dlock1 ab {FAR_FUTURE}\u{1b}[2J\n").into_bytes();
    slot.resize(512, 0);
    file.write_all_at(&slot, 4096).unwrap();
    shows_unreadable(dlock, "x", &format!("{FAR_FUTURE}\\u{{1b}}[2J"));
    let_go(&dir, holder);
}

#[test]
fn a_forged_redis_record_is_unreadable_and_the_lock_stays_busy() {
    let server = RedisServer::start();
    let url = server.url();
    let dlock = |args: &[&str]| {
        let mut cmd = dlock();
        cmd.args(["--backend", "redis", "--url", &url]).args(args);
        cmd
    };
    let mut conn = server.connection();
    redis::cmd("ZADD")
        .arg("dlock:{x}:holders")
        .arg(99_999_999_999_999u64)
        .arg("ab")
        .query::<()>(&mut conn)
        .unwrap();
    redis::cmd("HSET")
        .arg("dlock:{x}:owners")
        .arg("ab")
        .arg(FAR_FUTURE)
        .query::<()>(&mut conn)
        .unwrap();
    shows_unreadable(dlock, "x", FAR_FUTURE);
}

#[test]
fn a_forged_zookeeper_node_is_unreadable_and_the_lock_stays_busy() {
    let server = ZkServer::start();
    let data =
        r#"{"dlock":1,"mode":"exclusive","host":"h","pid":2,"owner":"ab","since":99999999999999}"#;
    server.create_with_parents("/dlock/x/_c_forged-lock-0000000000", data.as_bytes());
    shows_unreadable(|args| server.dlock(args), "x", data);
}

/// Standard output (or error) whose reader has gone before dlock writes.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    writer
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_with_the_usual_status() {
    let dir = LockDir::new();
    let locks = LockDir::new();
    let quiet = |args: &[&str]| {
        let mut cmd = locks.dlock(args);
        cmd.stdout(closed_pipe());
        output(cmd)
    };
    let out = quiet(&["status", "x"]);
    assert_eq!((code(&out), stderr(&out)), (1, String::new()), "free");
    let holder = hold(&|args| locks.dlock(args), &dir, "x");
    for (args, status) in [
        (&["status", "x"][..], 0),
        (&["status", "--json", "x"], 0),
        (&["list"], 0),
        (&["list", "--json"], 0),
    ] {
        let out = quiet(args);
        assert_eq!(
            (code(&out), stderr(&out)),
            (status, String::new()),
            "{args:?}"
        );
    }
    // And a message into a closed stderr: lost, but the status stands.
    let mut busy = locks.dlock(&["run", "-n", "x", "--", "true"]);
    busy.stderr(closed_pipe());
    assert_eq!(code(&output(busy)), 75);
    let_go(&dir, holder);
}

/// `dlock -b redis -u URL ARGS` against `server`.
fn on_redis(server: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = dlock();
    cmd.args(["--backend", "redis", "--url", &server.url()])
        .args(args);
    cmd
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
        let out = output(on_redis(&server, &["run", "n", "--", "true"]));
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
    let out = output(on_redis(
        &server,
        &["run", "n", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "9007199254740991");
    let out = output(on_redis(&server, &["run", "n", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(counter(&mut conn, "n").as_deref(), Some("9007199254740991"));
}

#[test]
fn a_release_grants_nothing_from_a_broken_redis_counter() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    let mut conn = server.connection();
    let holder = hold(&|args| on_redis(&server, args), &dir, "n");
    let mut waiter = on_redis(&server, &["run", "--ttl", "3s", "n", "--", "true"])
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
fn zookeeper_takes_names_outside_the_basic_multilingual_plane() {
    let server = ZkServer::start();
    for name in ["😀", "a/𝄞/b", "\u{10ffff}"] {
        let out = output(server.dlock(&["run", name, "--", "true"]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let mut holder = server
            .dlock(&["run", name, "--", "sleep", "30"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut listed = String::new();
        wait_until(&format!("{name} listed"), T, || {
            listed = stdout(&output(server.dlock(&["list"])));
            listed.contains(&format!("{name}\t"))
        });
        let out = output(server.dlock(&["release", "--force", name]));
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let _ = holder.kill();
        let _ = holder.wait();
    }
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

#[test]
fn a_ttl_longer_than_servers_count_is_a_usage_error() {
    let server = RedisServer::start();
    let dir = LockDir::new();
    for ttl in ["5000000000y", "25days", "18446744073709551615s"] {
        for mut cmd in [
            on_redis(&server, &["run", "--ttl", ttl, "n", "--", "true"]),
            dir.dlock(&["run", "--ttl", ttl, "n", "--", "true"]),
        ] {
            let out = output({
                cmd.stdout(Stdio::null());
                cmd
            });
            assert_eq!(code(&out), 64, "{ttl}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("at most 24days") || stderr(&out).contains("too large"),
                "{ttl}: {}",
                stderr(&out)
            );
        }
    }
    let out = output(on_redis(
        &server,
        &["run", "--ttl", "24days", "n", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
