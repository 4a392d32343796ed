//! The ZooKeeper backend's own mechanism against real servers (one per test, started by
//! `ZkServer`): what is left in ZooKeeper, waiters queued in order, one watcher per waiter, losing
//! the lock when the server stops, keeping it when it restarts, a killed holder's session, ACLs,
//! chroots, bad URLs, and interop with Apache Curator. What every backend owes is in the contract
//! suite.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::zk_server::ZkServer;
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
    let child = server.dlock(&args).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_file(&marker, T);
    child
}

fn let_go(dir: &LockDir, tag: &str) {
    std::fs::write(dir.file(&format!("{tag}.go")), "").unwrap();
}

fn token_of(dir: &LockDir, tag: &str) -> u64 {
    read_pid(&dir.file(&format!("{tag}.in"))) as u64
}

/// Collects a child's stderr on a thread so a test can wait for a line without blocking on it.
struct Stderr {
    text: Arc<Mutex<String>>,
}

impl Stderr {
    fn of(child: &mut Child) -> Stderr {
        let pipe = child.stderr.take().expect("stderr piped");
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        Stderr { text }
    }

    fn wait_for(&self, needle: &str) {
        wait_until(&format!("stderr to say {needle:?}"), T, || {
            self.text.lock().unwrap().contains(needle)
        });
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }
}

fn status_json(server: &ZkServer, name: &str) -> serde_json::Value {
    let out = output(server.dlock(&["status", "--json", name]));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

fn lock_nodes(server: &ZkServer, dir_node: &str) -> Vec<String> {
    server
        .children(&format!("/dlock/{dir_node}"))
        .unwrap_or_default()
}

#[test]
fn a_run_leaves_no_node_behind_and_the_empty_lock_directory_goes() {
    let server = ZkServer::start();
    let out = output(server.dlock(&["run", "env-test", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The holder's node is gone at once, and the server removes the emptied lock directory.
    assert_eq!(lock_nodes(&server, "env-test"), Vec::<String>::new());
    wait_until("the empty lock directory to go", T, || {
        server.children("/dlock") == Some(vec![])
    });
    let out = output(server.dlock(&["status", "env-test"]));
    assert_eq!(code(&out), 1, "free: {}", stdout(&out));
}

/// What `contract::*::busy_lock_exits_75_*` cannot see: the refused attempts leave no node in the
/// lock's directory, and status names that directory.
#[test]
fn refused_runs_leave_no_node_and_status_shows_the_lock_directory() {
    let server = ZkServer::start();
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

#[test]
fn shared_holders_run_together_and_exclude_an_exclusive_one() {
    let server = ZkServer::start();
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
    // The holder watches its own node; each waiter watches the one node ahead of it.
    wait_until("five waiters watching", T, || {
        mntr(&server, "zk_watch_count") == 6
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

#[test]
fn waiters_that_give_up_leave_no_node_behind() {
    let server = ZkServer::start();
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
        server.children("/dlock") == Some(vec![])
    });
}

#[test]
fn names_with_slashes_and_dots_map_to_one_escaped_node_each() {
    let server = ZkServer::start();
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

#[test]
fn server_restarted_within_the_session_timeout_keeps_the_lock() {
    let mut server = ZkServer::start();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &["--ttl", "10s"], "survivor", "h");
    let err = Stderr::of(&mut holder);
    server.restart();
    // The session and its node were restored from the data directory, and dlock reconnected to them.
    wait_until("dlock to reconnect its session", T, || {
        server
            .four_letter("wchs")
            .contains("1 connections watching 1 paths")
    });
    assert_eq!(lock_nodes(&server, "survivor").len(), 1);
    let_go(&dir, "h");
    let status = wait_exit(&mut holder, T);
    assert_eq!(status.code(), Some(0), "no false loss: {}", err.text());
    assert!(!err.text().contains("lost"), "{}", err.text());
}

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
    // Ports nobody listens on: bound and closed again at once.
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
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
        server.children("/apps/one/dlock"),
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

/// Compiles tests/support/CuratorLock.java against the Debian Curator jars.
fn compile_curator_program(dir: &Path) -> String {
    let classpath = "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:\
                     /usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar";
    assert!(
        Path::new("/usr/share/java/curator-recipes.jar").exists(),
        "Curator is not installed: run scripts/test (Debian package libcurator-recipes-java)"
    );
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/CuratorLock.java");
    let out = Command::new("javac")
        .args(["-d", dir.to_str().unwrap(), "-cp", classpath])
        .arg(&source)
        .output()
        .expect("javac (a JDK) is installed");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut full = format!("{}:{classpath}", dir.display());
    if Path::new("/usr/share/java/slf4j-nop.jar").exists() {
        full.push_str(":/usr/share/java/slf4j-nop.jar");
    }
    full
}

fn curator(classpath: &str, server: &ZkServer, mode: &str, held: &Path, release: &Path) -> Command {
    let mut cmd = Command::new("java");
    cmd.args([
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-cp",
        classpath,
        "CuratorLock",
    ])
    .arg(server.hosts())
    .args(["/dlock/interop", mode])
    .args([held, release])
    .stdin(Stdio::null());
    cmd
}

fn wait_for_queue(server: &ZkServer, length: usize) {
    wait_until(
        &format!("{length} nodes queued for /dlock/interop"),
        T,
        || lock_nodes(server, "interop").len() == length,
    );
}

#[test]
fn curator_mutex_and_dlock_exclude_each_other_both_ways() {
    let server = ZkServer::start();
    let dir = LockDir::new();
    let classpath = compile_curator_program(dir.path());

    // Curator holds: dlock is refused, sees who holds it, and waits for it.
    let (held, release) = (dir.file("c1.held"), dir.file("c1.release"));
    let mut c1 = curator(&classpath, &server, "wait", &held, &release)
        .spawn()
        .unwrap();
    wait_for_file(&held, T);
    let out = output(server.dlock(&["run", "-n", "interop", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is busy: held exclusive by"),
        "{}",
        stderr(&out)
    );
    let json = status_json(&server, "interop");
    assert!(
        json["holders"][0]["owner"]
            .as_str()
            .unwrap()
            .contains("not dlock"),
        "{json}"
    );
    let ran = dir.file("d1.ran");
    let mut d1 = server
        .dlock(&["run", "interop", "--", "touch", ran.to_str().unwrap()])
        .spawn()
        .unwrap();
    wait_for_queue(&server, 2);
    assert!(!ran.exists(), "dlock must wait for Curator's holder");
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut c1, T).success());
    assert!(wait_exit(&mut d1, T).success());
    assert!(ran.exists());

    // dlock holds: Curator is refused, and its waiter gets the lock when dlock lets go.
    let mut d2 = start_holder(&server, &dir, &[], "interop", "d2");
    let (held, release) = (dir.file("c2.held"), dir.file("c2.release"));
    let out = curator(&classpath, &server, "try", &held, &release)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "Curator must see dlock's node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!held.exists());
    let mut c2 = curator(&classpath, &server, "wait", &held, &release)
        .spawn()
        .unwrap();
    wait_for_queue(&server, 2);
    assert!(!held.exists(), "Curator must wait for dlock's holder");
    let_go(&dir, "d2");
    assert!(wait_exit(&mut d2, T).success());
    wait_for_file(&held, T);
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut c2, T).success());
}
