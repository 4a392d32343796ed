//! Reaching ZooKeeper: ACLs of an authenticated holder, an unreachable ensemble within the connect
//! timeout, malformed URLs, chroots that keep locks apart.

use super::*;

#[test]
fn nodes_of_an_authenticated_holder_cannot_be_deleted_by_other_identities() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let owner_url = server.url_as("alice", "s3cret");
    let marker = dir.file("h.in");
    let mut holder = server
        .dlock_at(
            &owner_url,
            &[
                "run",
                "guarded",
                "--",
                "sh",
                "-c",
                &format!(
                    "touch {}; {}",
                    marker.display(),
                    hold_until(&dir.file("h.go"))
                ),
            ],
        )
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    let nodes = lock_nodes(&server, "guarded");
    assert_eq!(nodes.len(), 1);
    let node = format!("/dlock/guarded/{}", nodes[0]);

    // Anyone may look; the location never shows the password.
    let json = status_json(&server, "guarded");
    assert_eq!(json["holders"].as_array().unwrap().len(), 1);
    let out = output(server.dlock_at(&owner_url, &["status", "guarded"]));
    assert!(!stdout(&out).contains("s3cret") && !stderr(&out).contains("s3cret"));

    // Neither an unauthenticated client nor another user may break it, through dlock or directly.
    for url in [server.url(), server.url_as("mallory", "guess")] {
        let out = output(server.dlock_at(&url, &["release", "--force", "guarded"]));
        assert_eq!(code(&out), 69, "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains("not authorised"), "{}", stderr(&out));
        assert!(!stderr(&out).contains("guess"), "{}", stderr(&out));
    }
    assert!(matches!(
        server.delete_as(None, &node),
        Err(zookeeper_client::Error::NoAuth)
    ));
    assert!(matches!(
        server.delete_as(Some(("mallory", "guess")), &node),
        Err(zookeeper_client::Error::NoAuth)
    ));
    // Nor join it: another identity cannot create a node in the lock's directory.
    let out = output(server.dlock(&["run", "guarded", "--", "true"]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert_eq!(lock_nodes(&server, "guarded").len(), 1);

    // The owner's identity can.
    let out = output(server.dlock_at(&owner_url, &["release", "--force", "guarded"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(wait_exit(&mut holder, T).code(), Some(79));
}

#[test]
fn unreachable_ensemble_exits_69_within_the_connect_timeout_naming_the_hosts() {
    // Ports nobody listens on (nor can, while held).
    let refusing = [refusing_port(), refusing_port()];
    let ports: Vec<u16> = refusing.iter().map(|(_, port)| *port).collect();
    let hosts = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let started = Instant::now();
    let mut cmd = dlock();
    cmd.args([
        "-b",
        "zk",
        "-u",
        &format!("zk://u:pw@{hosts}/app"),
        "--connect-timeout",
        "1s",
        "run",
        "x",
        "--",
        "true",
    ]);
    let out = output(cmd);
    let took = started.elapsed();
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot reach ZooKeeper at {hosts} within 1s")),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("pw"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn malformed_zk_urls_exit_64() {
    for url in [
        "zk://",
        "zk://host:port",
        "zk://h:1/a//b",
        "http://h:1",
        "zk://a:1,,b:2",
    ] {
        let mut cmd = dlock();
        cmd.args(["-b", "zk", "-u", url, "run", "x", "--", "true"]);
        let out = output(cmd);
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert!(stderr(&out).starts_with("dlock: "), "{}", stderr(&out));
    }
    let mut cmd = dlock();
    cmd.args([
        "-b", "zk", "-u", "zk://a:1", "-u", "zk://b:1", "status", "x",
    ]);
    assert_eq!(code(&output(cmd)), 64);
}

/// zk:// and etcd:// URLs share one host-list parser: a host that is not a host (text after a
/// `[v6]` address, a `%` or `\`) is refused before anything connects, as etcd:// always did.
#[test]
fn zk_hosts_are_checked_as_etcd_hosts_are() {
    for (url, what) in [
        ("zk://[::1]x", "bad host \"[::1]x\""),
        ("zk://a%41:1", "bad host \"a%41\""),
        ("zk://a\\b:1", "bad host \"a\\\\b\""),
    ] {
        let mut cmd = dlock();
        cmd.args([
            "-b",
            "zk",
            "-u",
            url,
            "--connect-timeout",
            "1s",
            "status",
            "x",
        ]);
        let out = output(cmd);
        assert_eq!(code(&out), 64, "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains(what), "{url}: {}", stderr(&out));
    }
}

#[test]
fn chroot_keeps_locks_apart() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let app = format!("{}/apps/one", server.url());
    let marker = dir.file("in");
    let mut holder = server
        .dlock_at(
            &app,
            &[
                "run",
                "job",
                "--",
                "sh",
                "-c",
                &format!(
                    "touch {}; {}",
                    marker.display(),
                    hold_until(&dir.file("go"))
                ),
            ],
        )
        .spawn()
        .unwrap();
    wait_for_file(&marker, T);
    assert_eq!(
        lock_dirs(&server, "/apps/one/dlock"),
        Some(vec!["job".to_owned()])
    );
    let out = output(server.dlock(&["run", "-n", "job", "--", "true"]));
    assert_eq!(
        code(&out),
        0,
        "another chroot is another namespace: {}",
        stderr(&out)
    );
    let out = output(server.dlock_at(&app, &["run", "-n", "job", "--", "true"]));
    assert_eq!(code(&out), 75);
    std::fs::write(dir.file("go"), "").unwrap();
    assert!(wait_exit(&mut holder, T).success());
}

/// A server may grant a shorter session than the ttl asks for (its maxSessionTimeout): dlock then
/// checks the session within that shorter time from the start, and a run longer than a third of
/// the ttl keeps its lock (it was judged stopped at its first renewal, and lost its lock, with 79).
#[test]
fn a_session_shorter_than_the_ttl_keeps_the_lock_through_a_long_run() {
    let server = ZkServer::start_with_max_session(Duration::from_secs(2));
    let out = output(server.dlock(&["-v", "run", "--ttl", "9s", "short", "--", "sleep", "3.5"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("renewed \"short\""),
        "{}",
        stderr(&out)
    );
}
