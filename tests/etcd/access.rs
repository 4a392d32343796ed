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
    let (_held, refused) = refusing_port();
    for port in [refused, silent_port] {
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
    let (_refusing, dead) = refusing_port();
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
