//! Redis behind Sentinel (`redis+sentinel://`) and `--replicas` (a URL's `?replicas=`), against a
//! real master, two replicas and three sentinels started per test: a forced failover while a lock
//! is held and waited for, replicas that do not acknowledge, and sentinels that cannot help.

use std::path::Path;
use std::time::Duration;

use crate::redis::server::{dlock_at, RedisServer};
use crate::redis::sentinel_set::SentinelSet;
use crate::support::watched::Watched;
use crate::support::*;

const T: Duration = Duration::from_secs(60);

/// A `dlock -v run` whose command writes its token to `token_file` and then runs until
/// `release_file` exists (bounded to a minute).
fn holder(
    set: &SentinelSet,
    options: &[&str],
    name: &str,
    token_file: &Path,
    release_file: &Path,
) -> Watched {
    let script = format!(
        "echo $DLOCK_TOKEN > {t}.tmp; mv {t}.tmp {t}; i=0; \
         while [ ! -e {r} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
        t = token_file.display(),
        r = release_file.display()
    );
    let mut args = vec!["-v", "run"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
    Watched::start(set.dlock(&args))
}

fn token_in(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).expect("token file");
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a token: {text:?}"))
}

fn touch(path: &Path) {
    std::fs::write(path, "").expect("touch");
}

/// The fencing counter of `name` on `node`.
fn counter(node: &RedisServer, name: &str) -> u64 {
    redis::cmd("GET")
        .arg(format!("dlock:{{{name}}}:token"))
        .query::<Option<u64>>(&mut node.connection())
        .expect("GET the token")
        .unwrap_or(0)
}

#[test]
fn with_replicas_a_failover_keeps_the_lock_and_tokens_keep_growing() {
    let set = SentinelSet::start();
    let dir = LockDir::new();
    let options = ["--replicas", "1", "--ttl", "6s"];
    let (a_token, a_done) = (dir.file("a.token"), dir.file("a.done"));
    let mut a = holder(&set, &options, "job", &a_token, &a_done);
    wait_for_file(&a_token, T);
    let first = token_in(&a_token);
    let (b_token, b_done) = (dir.file("b.token"), dir.file("b.done"));
    let mut b = holder(&set, &options, "job", &b_token, &b_done);
    b.wait_for("waiting for lock", T);

    let old = set.master_port();
    let new = set.fail_over();
    assert_ne!(old, new);
    // The holder renews on the new master for longer than its lease, so the waiter, whose
    // connection went to the old master, must have followed too to keep waiting.
    a.wait_for_more("renewed", 4, T);
    assert!(
        !b_token.exists(),
        "the waiter got the lock while it was held"
    );
    touch(&a_done);
    let (status, err) = a.finish(T);
    assert_eq!(
        status, 0,
        "the holder must keep its lock through the failover:\n{err}"
    );

    wait_for_file(&b_token, T);
    let second = token_in(&b_token);
    assert!(second > first, "token {second} after {first}");
    touch(&b_done);
    let (status, err) = b.finish(T);
    assert_eq!(status, 0, "{err}");

    let out = output(set.dlock(&[
        "run",
        "--replicas",
        "1",
        "job",
        "--",
        "sh",
        "-c",
        "echo $DLOCK_TOKEN",
    ]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let third: u64 = stdout(&out).trim().parse().expect("a token");
    assert!(third > second, "token {third} after {second}");
    assert!(counter(set.master(), "job") >= third);
}

/// A forced failover leaves the old master running, and taking writes, for seconds before the
/// sentinels turn it into a replica: a holder that kept renewing there would let its lease on the
/// new master run out. It asks the sentinels and renews on the new master.
#[test]
fn a_holder_renews_on_the_new_master_after_a_forced_failover() {
    let set = SentinelSet::start();
    let dir = LockDir::new();
    let (token, done) = (dir.file("a.token"), dir.file("a.done"));
    let mut a = holder(&set, &["--ttl", "3s"], "job", &token, &done);
    wait_for_file(&token, T);
    // Without --replicas nothing waits for the replicas (the window the README states): here
    // the test does, so that the new master starts with the lease.
    for replica in set.replicas() {
        wait_until("the lease on a replica", T, || {
            replica.keys().contains(&"dlock:{job}:holders".to_owned())
        });
    }
    let (b_token, b_done) = (dir.file("b.token"), dir.file("b.done"));
    let mut b = holder(&set, &["--ttl", "3s"], "job", &b_token, &b_done);
    b.wait_for("waiting for lock", T);
    set.fail_over();
    // Longer than the lease: only renewals on the new master keep it there, and only a waiter
    // that followed too does not find it free on the old one.
    a.wait_for_more("renewed", 5, T);
    let out = output(set.dlock(&["status", "job"]));
    assert_eq!(
        code(&out),
        0,
        "the lock is free on the new master: {}",
        stdout(&out)
    );
    assert!(
        !b_token.exists(),
        "the waiter got the lock while it was held"
    );
    touch(&done);
    let (status, err) = a.finish(T);
    assert_eq!(status, 0, "{err}");
    wait_for_file(&b_token, T);
    assert!(token_in(&b_token) > token_in(&token));
    touch(&b_done);
    let (status, err) = b.finish(T);
    assert_eq!(status, 0, "{err}");
}

#[test]
fn replicas_that_do_not_acknowledge_refuse_the_lock_or_end_the_lease() {
    let set = SentinelSet::start();
    let dir = LockDir::new();
    let (token, done) = (dir.file("a.token"), dir.file("a.done"));
    let a = holder(
        &set,
        &["--replicas", "2", "--ttl", "3s"],
        "job",
        &token,
        &done,
    );
    wait_for_file(&token, T);

    let replicas = set.replicas();
    for r in &replicas {
        r.pause();
    }
    // Renewals are no longer acknowledged: the lease runs out and the command is stopped.
    let (status, err) = a.finish(T);
    assert_eq!(status, 79, "{err}");
    assert!(err.contains("replicas acknowledged"), "{err}");

    // The same without acknowledgements: refused, and the lock given back (a later run without
    // --replicas gets it at once).
    let out = output(set.dlock(&[
        "--connect-timeout",
        "1s",
        "run",
        "--replicas",
        "1",
        "job",
        "--",
        "true",
    ]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only 0 of 1 replicas acknowledged"),
        "{}",
        stderr(&out)
    );
    // The same said by the sentinel URL itself.
    let url = format!("{}?replicas=1", set.url());
    let out = output(dlock_at(
        &[url],
        &["--connect-timeout", "1s", "run", "job", "--", "true"],
    ));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only 0 of 1 replicas acknowledged"),
        "{}",
        stderr(&out)
    );
    // Without --replicas dlock does not wait for them: the lock is granted though no replica has
    // it (the window the README describes).
    let out = output(set.dlock(&["run", "-n", "job", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for r in &replicas {
        r.resume();
    }
}

#[test]
fn a_master_the_sentinels_do_not_know_is_a_clear_error() {
    let set = SentinelSet::start();
    let out = output(dlock_at(
        &[set.url_for("nosuch")],
        &["run", "job", "--", "true"],
    ));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("monitor no master named \"nosuch\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn sentinels_all_down_is_backend_unavailable() {
    let refusing = [refusing_port(), refusing_port()];
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{}/main",
        refusing[0].1, refusing[1].1
    );
    let out = output(dlock_at(&[url], &["run", "job", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("any sentinel of \"main\"") && err.contains("connection refused"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn replicas_is_for_the_redis_backend_only() {
    let dir = LockDir::new();
    let out = output(dir.dlock(&["run", "--replicas", "1", "job", "--", "true"]));
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(stderr(&out).contains("--replicas"), "{}", stderr(&out));
    // From the environment (set fleet-wide for Redis) it does not break another backend's run.
    let mut cmd = dir.dlock(&["run", "job", "--", "true"]);
    cmd.env("DLOCK_REPLICAS", "1");
    let out = output(cmd);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `--replicas` also on a plain `redis://` master with a replica of its own: granted once the
/// replica acknowledged, refused (69, lock given back) while it does not answer.
#[test]
fn replicas_work_on_a_plain_master_too() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_until("the replica online", T, || {
        crate::redis::sentinel_set::info(&master, "replication").contains("state=online")
    });
    // Each call gives WAIT half its time: a short budget where no acknowledgement may come, the
    // default (5s) where one must, so a loaded machine's slow REPLCONF ACK is not a refusal.
    let run_within = |budget: &str, options: &[&str]| {
        let mut args = vec!["--connect-timeout", budget, "run"];
        args.extend_from_slice(options);
        args.extend_from_slice(&["job", "--", "true"]);
        output(master.dlock(&args))
    };
    let run = |options: &[&str]| run_within("1s", options);
    let out = run_within("5s", &["--replicas", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    replica.pause();
    let out = run(&["--replicas", "1"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only 0 of 1 replicas acknowledged"),
        "{}",
        stderr(&out)
    );
    // Also when it would not wait (its refusal leaves no queue place to clean up after it).
    let out = run(&["-n", "--replicas", "2"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    replica.resume();
    let out = run_within("5s", &["-n"]);
    assert_eq!(
        code(&out),
        0,
        "the refused runs gave the lock back: {}",
        stderr(&out)
    );
}

/// A sentinel's answer is outside input: a master "address" with a terminal escape in it is
/// refused (69), and the message does not carry the escape.
#[test]
fn a_sentinel_naming_an_unreadable_address_is_refused() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let liar = std::thread::spawn(move || {
        // One connection, one question, one answer: [host with an escape, port].
        let (mut conn, _) = listener.accept().expect("dlock connects");
        conn.set_read_timeout(Some(T)).expect("a read timeout");
        let mut question = [0u8; 512];
        let _ = conn.read(&mut question);
        let _ = conn.write_all(b"*2\r\n$8\r\nevil\x1b[2J\r\n$4\r\n6379\r\n");
    });
    let url = format!("redis+sentinel://127.0.0.1:{port}/main");
    let out = output(dlock_at(&[url], &["run", "job", "--", "true"]));
    let _ = liar.join();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("not a host name or IP") && !err.contains('\u{1b}'),
        "{err:?}"
    );
}

/// A master with one replica, online.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_until("the replica online", T, || {
        crate::redis::sentinel_set::info(&master, "replication").contains("state=online")
    });
    (master, replica)
}

/// `dlock --connect-timeout BUDGET run -n job -- true` on `url`, with `options` before `run` and
/// `env` set: WAIT gets half the budget.
fn run_at(url: &str, budget: &str, options: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut args = vec!["--connect-timeout", budget];
    args.extend_from_slice(options);
    args.extend_from_slice(&["run", "-n", "job", "--", "true"]);
    let mut cmd = dlock_at(&[url], &args);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = output(cmd);
    (code(&out), stderr(&out))
}

/// `?replicas=N` in a `redis://` URL is `--replicas N` for that server; the option, DLOCK_REPLICAS
/// and the configuration file's `replicas` are the default for a URL that does not say it, and the
/// URL's own wins over each of them.
#[test]
fn replicas_in_the_url_waits_for_them_and_wins_over_the_option() {
    let (master, replica) = master_and_replica();
    let plain = master.url();
    let one = format!("{plain}/?replicas=1");
    let none = format!("{plain}/0?replicas=0");
    let (status, err) = run_at(&one, "5s", &[], &[]);
    assert_eq!(status, 0, "acknowledged by the running replica: {err}");

    replica.pause();
    let unacknowledged = |(status, err): (i32, String)| {
        assert_eq!(status, 69, "{err}");
        assert!(err.contains("only 0 of 1 replicas acknowledged"), "{err}");
    };
    unacknowledged(run_at(&one, "1s", &[], &[]));
    unacknowledged(run_at(&one, "1s", &["--replicas", "0"], &[]));
    unacknowledged(run_at(&one, "1s", &[], &[("DLOCK_REPLICAS", "0")]));
    // The aliases, on a URL that does not say it.
    unacknowledged(run_at(&plain, "1s", &["--replicas", "1"], &[]));
    unacknowledged(run_at(&plain, "1s", &[], &[("DLOCK_REPLICAS", "1")]));
    let dir = LockDir::new();
    let config = dir.file("config");
    std::fs::write(&config, "replicas = 1\n").expect("write the configuration file");
    let config = config.to_str().expect("a UTF-8 path");
    unacknowledged(run_at(&plain, "1s", &[], &[("DLOCK_CONFIG", config)]));
    // A URL that says 0 does not wait, whatever the default.
    for (options, env) in [
        (&["--replicas", "1"][..], &[][..]),
        (&[], &[("DLOCK_REPLICAS", "1")]),
        (&[], &[("DLOCK_CONFIG", config)]),
    ] {
        let (status, err) = run_at(&none, "1s", options, env);
        assert_eq!(status, 0, "{options:?} {env:?}: {err}");
    }
    // And none at all does not either (the window the README describes).
    let (status, err) = run_at(&plain, "1s", &[], &[]);
    assert_eq!(status, 0, "{err}");

    for bad in [
        "replicas=",
        "replicas=one",
        "replicas=-1",
        "replicas=1&replicas=2",
    ] {
        let (status, err) = run_at(&format!("{plain}/?{bad}"), "1s", &[], &[]);
        assert_eq!(status, 64, "{bad}: {err}");
        assert!(err.contains("replicas="), "{bad}: {err}");
    }
    replica.resume();
}

/// With Redlock each URL says its own: only the server whose URL asks for a replica it does not
/// have refuses, and URLs that say 0 override `--replicas` on servers that have none.
#[test]
fn each_redlock_url_says_its_own_replicas() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let args = ["--connect-timeout", "1s", "run", "-n", "job", "--", "true"];
    urls[2].push_str("/?replicas=1");
    let out = output(dlock_at(&urls, &args));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    let (asked, others) = (servers[2].port(), [servers[0].port(), servers[1].port()]);
    assert!(
        err.contains(&format!(
            "127.0.0.1:{asked}: only 0 of 1 replicas acknowledged"
        )) && others.iter().all(|p| !err.contains(&format!(":{p}"))),
        "{err}"
    );

    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("{}/?replicas=0", s.url()))
        .collect();
    let out = output(dlock_at(&urls, &[&["--replicas", "1"][..], &args].concat()));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `?replicas=` in another backend's URL is a usage error naming that backend, before any
/// connection is tried.
#[test]
fn replicas_in_another_backend_s_url_is_a_usage_error_naming_it() {
    let dir = LockDir::new();
    let port = free_port();
    for (backend, url) in [
        (
            "file",
            format!("file://{}?replicas=1", dir.path().display()),
        ),
        ("zk", format!("zk://127.0.0.1:{port}/?replicas=1")),
        ("etcd", format!("etcd://127.0.0.1:{port}?replicas=1")),
        (
            "postgres",
            format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable&replicas=1"),
        ),
        ("mysql", format!("mysql://u@127.0.0.1:{port}/db?replicas=1")),
    ] {
        let mut cmd = dlock();
        cmd.args([
            "--backend",
            backend,
            "--url",
            &url,
            "run",
            "job",
            "--",
            "true",
        ]);
        let out = output(cmd);
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{url}: {err}");
        assert!(
            err.contains(&format!("replicas= in {backend}://"))
                && err.contains(&format!("is for the redis backend, not {backend}"))
                && err.lines().count() == 1,
            "{url}: {err}"
        );
    }
}

/// A sentinel that names a node nobody answers on (as Redis leaves one whose promoted replica
/// died before its failover ended) holds dlock up only until dlock asks the next sentinel: the
/// lock is taken on the master the others name.
#[test]
fn a_sentinel_naming_a_dead_master_is_passed_over() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    let set = SentinelSet::start();
    let (_held, dead) = refusing_port();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let liar_port = listener.local_addr().expect("its address").port();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let liar = {
        let done = done.clone();
        std::thread::spawn(move || {
            // Each question, on each connection, answered with the dead node's address.
            for conn in listener.incoming() {
                if done.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut conn) = conn else { continue };
                conn.set_read_timeout(Some(T)).expect("a read timeout");
                let dead = dead.to_string();
                let answer = format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{dead}\r\n", dead.len());
                let mut question = [0u8; 512];
                while conn.read(&mut question).is_ok_and(|n| n > 0) {
                    let _ = conn.write_all(answer.as_bytes());
                }
            }
        })
    };
    let sentinels: Vec<String> = std::iter::once(liar_port)
        .chain(set.sentinel_ports())
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let url = format!("redis+sentinel://{}/main", sentinels.join(","));
    let out = output(dlock_at(&[url], &["run", "-w", "20s", "job", "--", "true"]));
    // Sentinels that all name the dead node: each is asked once, and the run fails (69) without
    // running its command.
    let liars = format!("redis+sentinel://127.0.0.1:{liar_port},127.0.0.1:{liar_port}/main");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let ran = scratch.path().join("ran");
    let script = format!("touch {}", ran.display());
    let refused = output(dlock_at(
        &[liars],
        &["run", "job", "--", "sh", "-c", &script],
    ));
    done.store(true, Ordering::SeqCst);
    let _ = std::net::TcpStream::connect(("127.0.0.1", liar_port));
    let _ = liar.join();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        counter(set.master(), "job") >= 1,
        "the lock was taken on the master"
    );
    assert_eq!(code(&refused), 69, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(&format!("cannot reach redis at 127.0.0.1:{dead}")),
        "{}",
        stderr(&refused)
    );
    assert!(!ran.exists(), "the command ran without the lock");
}
