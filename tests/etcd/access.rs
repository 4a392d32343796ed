//! Reaching etcd: no message shows the password, an unreachable endpoint within the connect
//! timeout, every endpoint tried, a busy try and a cancelled wait leave nothing behind, a waiter
//! rides out a restart, several names and trees.

use super::*;

#[test]
fn no_message_shows_the_password() {
    let server = shared();
    for url in [
        "etcd://alice:SECRET@127.0.0.1:1".to_owned(),
        format!("etcd://alice:SECRET@127.0.0.1:{}", server.port()),
        "etcd://alice:SECRET@127.0.0.1:bad".to_owned(),
    ] {
        let out = output(at(
            &url,
            &["--connect-timeout", "2s", "-v", "run", "pw", "--", "true"],
        ));
        let text = stdout(&out) + &stderr(&out);
        assert_ne!(code(&out), 0, "{text}");
        assert!(!text.contains("SECRET"), "{url}: {text}");
        assert!(
            text.contains("***@") || text.contains("127.0.0.1"),
            "{text}"
        );
    }
}

#[test]
fn an_unreachable_endpoint_exits_69_within_the_connect_timeout() {
    // One that refuses, and one that accepts connections but never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    for port in [free_port(), silent_port] {
        let started = Instant::now();
        let out = output_within(
            at(
                &format!("etcd://127.0.0.1:{port}"),
                &["--connect-timeout", "1s", "run", "x", "--", "true"],
            ),
            Duration::from_secs(10),
        );
        assert_eq!(code(&out), 69, "{}", stderr(&out));
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(stderr(&out).starts_with("dlock: "), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("127.0.0.1:{port}")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn every_endpoint_is_tried() {
    let server = shared();
    let dead = free_port();
    let url = format!("etcd://127.0.0.1:{dead},127.0.0.1:{}", server.port());
    let out = output(at(&url, &["run", "endpoints", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn a_busy_try_and_a_cancelled_wait_leave_nothing_behind() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &[], "tidy", "h");
    let out = output(on(server, &["run", "-n", "tidy", "--", "true"]));
    assert_eq!(code(&out), 75);
    let out = output(on(
        server,
        &["run", "--wait", "300ms", "tidy", "--", "true"],
    ));
    assert_eq!(code(&out), 75);
    assert_eq!(server.keys("/dlock/tidy/"), 1, "only the holder's key");
    let_go(&dir, "h");
    assert_eq!(exit_code(&mut holder), 0);
    assert_eq!(server.keys("/dlock/tidy/"), 0);
}

#[test]
fn a_waiter_rides_out_a_restart_of_etcd() {
    let mut server = EtcdServer::start();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &["--ttl", "20s"], "restart", "h");
    let mut waiter = spawn_holder(&server, &dir, &["--ttl", "20s"], "restart", "w");
    wait_for_keys(&server, "restart", 2);
    server.restart();
    let_go(&dir, "h");
    assert_eq!(exit_code(&mut holder), 0);
    wait_for_file(&dir.file("w.in"), T);
    assert!(token_of(&dir, "w") > token_of(&dir, "h"));
    let_go(&dir, "w");
    assert_eq!(exit_code(&mut waiter), 0);
}

#[test]
fn several_names_and_trees_through_the_supervisor() {
    let server = shared();
    let dir = LockDir::new();
    let mut holder = start_holder(server, &dir, &["--tree"], "/proj/site", "t");
    // A sibling runs alongside; the parent, taken exclusively, must wait.
    let out = output(on(
        server,
        &["run", "-n", "--tree", "/proj/other", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(on(server, &["run", "-n", "--tree", "/proj", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let_go(&dir, "t");
    assert_eq!(exit_code(&mut holder), 0);
    // Several names: all or nothing (taken in sorted order, so multi-a first).
    let mut holder = start_holder(server, &dir, &[], "multi-z", "z");
    let out = output(on(
        server,
        &["run", "-n", "multi-a", "multi-z", "--", "true"],
    ));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert_eq!(
        server.keys("/dlock/multi-a/"),
        0,
        "nothing kept of a partial take"
    );
    let_go(&dir, "z");
    assert_eq!(exit_code(&mut holder), 0);
    let out = output(on(server, &["run", "multi-a", "multi-b", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Runs `etcdctl ARGS` on `server` and fails the test if it fails.
fn etcdctl_ok(server: &EtcdServer, args: &[&str]) {
    let out = server.etcdctl(args).output().expect("etcdctl");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn with_auth_a_user_granted_the_prefix_locks_and_others_exit_69_without_their_password_shown() {
    let server = EtcdServer::start();
    etcdctl_ok(&server, &["user", "add", "root:rootpw"]);
    etcdctl_ok(&server, &["role", "add", "locker"]);
    etcdctl_ok(
        &server,
        &[
            "role",
            "grant-permission",
            "locker",
            "--prefix=true",
            "readwrite",
            "/dlock/",
        ],
    );
    etcdctl_ok(&server, &["user", "add", "alice:alicepw"]);
    etcdctl_ok(&server, &["user", "grant-role", "alice", "locker"]);
    etcdctl_ok(&server, &["user", "add", "bob:bobpw"]);
    etcdctl_ok(&server, &["auth", "enable"]);
    let url = |credentials: &str| format!("etcd://{credentials}@127.0.0.1:{}", server.port());

    // The README's grants are enough for every command.
    let alice = url("alice:alicepw");
    let out = output(at(
        &alice,
        &["run", "authz", "--", "sh", "-c", "echo $DLOCK_TOKEN"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).trim().parse::<u64>().is_ok(),
        "{}",
        stdout(&out)
    );
    let go = LockDir::new();
    let flag = go.file("go");
    let mut holder = at(
        &alice,
        &["run", "authz", "--", "sh", "-c", &hold_until(&flag)],
    )
    .spawn()
    .unwrap();
    wait_until("alice's holder to show in status", T, || {
        let out = output(at(&alice, &["status", "--json", "authz"]));
        code(&out) == 0 && stdout(&out).contains("\"pid\"")
    });
    let out = output(at(&alice, &["list"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = output(at(&alice, &["run", "--no-wait", "authz", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    std::fs::write(&flag, "").unwrap();
    assert!(wait_exit(&mut holder, T).success());

    // A wrong password, a user without the prefix, no user: one line, 69, no password.
    let anonymous = format!("etcd://127.0.0.1:{}", server.port());
    for (url, secret, why) in [
        (url("alice:wrong"), Some("wrong"), "authentication failed"),
        (
            url("bob:bobpw"),
            Some("bobpw"),
            "permission denied (dlock needs a user with read and write on the prefix /dlock/",
        ),
        (
            anonymous,
            None,
            "etcd asks for a user (give etcd://user:password@...)",
        ),
    ] {
        let out = output(at(
            &url,
            &["--connect-timeout", "5s", "run", "authz", "--", "true"],
        ));
        let err = stderr(&out);
        assert_eq!(code(&out), 69, "{err}");
        assert!(
            err.starts_with("dlock: ") && err.trim_end().lines().count() == 1,
            "{err}"
        );
        assert!(err.contains(why), "{err}");
        assert!(secret.is_none_or(|s| !err.contains(s)), "{err}");
    }
    // Nothing left by any of them.
    let out = server
        .etcdctl(&[
            "--user",
            "root:rootpw",
            "get",
            "--prefix",
            "--keys-only",
            "/dlock/",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");
}
