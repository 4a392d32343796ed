//! Interop with Apache Curator: a small Java program holding Curator's InterProcessMutex on the
//! same path as dlock, each excluding the other both ways.

use super::*;

/// Compiles tests/zk/CuratorLock.java against the Debian Curator jars.
pub(super) fn compile_curator_program(dir: &Path) -> String {
    let classpath = "/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:\
                     /usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar";
    assert!(
        Path::new("/usr/share/java/curator-recipes.jar").exists(),
        "Curator is not installed: run scripts/test (Debian package libcurator-recipes-java)"
    );
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zk/CuratorLock.java");
    let out = program("javac")
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

/// The classpath of the Curator program, compiled once for the whole test run.
pub(super) fn curator_classpath() -> &'static str {
    static CLASSPATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CLASSPATH.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("curator-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        compile_curator_program(&dir)
    })
}

fn curator(classpath: &str, server: &ZkServer, mode: &str, held: &Path, release: &Path) -> Command {
    curator_at(classpath, server, "/dlock/interop", mode, held, release)
}

/// CuratorLock on `path` (Curator's InterProcessMutex; `.arg("write")` or `.arg("read")` for
/// the halves of its InterProcessReadWriteLock).
pub(super) fn curator_at(
    classpath: &str,
    server: &ZkServer,
    path: &str,
    mode: &str,
    held: &Path,
    release: &Path,
) -> Command {
    let mut cmd = program("java");
    cmd.args([
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-cp",
        classpath,
        "CuratorLock",
    ])
    .arg(server.hosts())
    .args([path, mode])
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
    let server = on_the_suites_server();
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

/// dlock's two nodes of the one exclusive holder of `name`: its `lock-` node and its `__WRIT__`.
fn pair_of(server: &ZkServer, name: &str) -> (String, String) {
    let nodes = server.children(&format!("/dlock/{name}")).unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let find = |kind: &str| {
        let node = nodes.iter().find(|n| n.contains(kind));
        node.unwrap_or_else(|| panic!("no {kind} in {nodes:?}"))
            .clone()
    };
    let (lock, writ) = (find("lock-"), find("__WRIT__"));
    // One protected prefix, and numbers in a row: no other client's node can come between.
    let (prefix, number) = lock.split_once("lock-").unwrap();
    let (writ_prefix, writ_number) = writ.split_once("__WRIT__").unwrap();
    assert!(
        prefix.starts_with("_c_") && prefix == writ_prefix,
        "{nodes:?}"
    );
    let number: u64 = number.parse().unwrap();
    assert_eq!(writ_number.parse::<u64>().unwrap(), number + 1, "{nodes:?}");
    (lock, writ)
}

#[test]
fn an_exclusive_holders_two_nodes_are_one_holder_and_release_force_removes_both() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &[], "pair", "h");
    let (lock, writ) = pair_of(&server, "pair");
    let classpath = curator_classpath();
    // Curator's write and read locks wait for the pair (a watch on its `__WRIT__`), then give up.
    for recipe in ["write", "read"] {
        let (held, release) = (dir.file("t.held"), dir.file("t.release"));
        let out = curator_at(
            classpath,
            &server,
            "/dlock/pair",
            "timeout",
            &held,
            &release,
        )
        .arg(recipe)
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(3), "{recipe}: {out:?}");
        assert!(!held.exists(), "{recipe}");
    }
    let (held, release) = (dir.file("w.held"), dir.file("w.release"));
    let mut writer = curator_at(classpath, &server, "/dlock/pair", "wait", &held, &release)
        .arg("write")
        .spawn()
        .unwrap();
    wait_until("Curator's writer to queue", T, || {
        server.children("/dlock/pair").is_some_and(|c| c.len() == 3)
    });
    let json = status_json(&server, "pair");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(holders[0]["pid"], holder.id(), "{json}");
    let waiters = json["waiters"].as_array().unwrap();
    assert_eq!(waiters.len(), 1, "{json}");
    assert!(
        waiters[0]["owner"].as_str().unwrap().contains("not dlock"),
        "{json}"
    );
    let list = output(server.dlock(&["list", "--json"]));
    let list: serde_json::Value = serde_json::from_str(&stdout(&list)).unwrap();
    assert_eq!(list[0]["holders"].as_array().unwrap().len(), 1, "{list}");
    let out = output(server.dlock(&["run", "-n", "pair", "--", "true"]));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert_eq!(
        stderr(&out)
            .matches(&format!("pid {}", holder.id()))
            .count(),
        1,
        "one holder: {}",
        stderr(&out)
    );

    let out = output(server.dlock(&["release", "--force", "pair"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    wait_for_file(&held, T);
    let left = server.children("/dlock/pair").unwrap();
    assert!(!left.contains(&lock) && !left.contains(&writ), "{left:?}");
    assert_eq!(wait_exit(&mut holder, T).code(), Some(79));
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut writer, T).success());
}

#[test]
fn a_killed_exclusive_holder_leaves_neither_node_once_its_session_expires() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &["--ttl", "2s"], "killed", "h");
    pair_of(&server, "killed");
    let (held, release) = (dir.file("r.held"), dir.file("r.release"));
    let classpath = curator_classpath();
    let mut reader = curator_at(classpath, &server, "/dlock/killed", "wait", &held, &release)
        .arg("read")
        .spawn()
        .unwrap();
    wait_until("Curator's reader to queue", T, || {
        server
            .children("/dlock/killed")
            .is_some_and(|c| c.len() == 3)
    });
    assert!(!held.exists(), "Curator's reader got in beside dlock");
    signal(holder.id(), libc::SIGKILL);
    wait_exit(&mut holder, T);
    wait_for_file(&held, T);
    let left = server.children("/dlock/killed").unwrap();
    assert_eq!(left.len(), 1, "only Curator's reader: {left:?}");
    assert!(left[0].contains("__READ__"), "{left:?}");
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut reader, T).success());
}

/// Without its `__WRIT__` node Curator's read-write lock no longer sees the holder: the lock is
/// lost, as when its `lock-` node goes.
#[test]
fn a_holder_whose_either_node_is_deleted_loses_the_lock() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    for which in [0, 1] {
        let tag = format!("h{which}");
        let mut holder = start_holder(&server, &dir, &[], "either", &tag);
        let err = Stderr::of(&mut holder);
        let pair = pair_of(&server, "either");
        let node = [&pair.0, &pair.1][which];
        server
            .delete_as(None, &format!("/dlock/either/{node}"))
            .unwrap();
        assert_eq!(wait_exit(&mut holder, T).code(), Some(79), "{}", err.text());
        err.wait_for(&format!("{node} was deleted"));
        wait_until("the other node to go", T, || {
            lock_nodes(&server, "either").is_empty()
        });
    }
}

#[test]
fn a_seat_is_two_nodes_one_holder_and_release_force_removes_both() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let mut holder = start_holder(&server, &dir, &["--limit", "2"], "seat", "h");
    let nodes = server.children("/dlock/seat").unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(nodes.iter().any(|n| n.contains("__SEAT__")), "{nodes:?}");
    assert!(nodes.iter().any(|n| n.contains("__READ__")), "{nodes:?}");
    let json = status_json(&server, "seat");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(holders[0]["pid"], holder.id(), "{json}");
    assert_eq!(json["waiters"].as_array().unwrap().len(), 0, "{json}");
    let out = output(server.dlock(&["release", "--force", "seat"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        server.children("/dlock/seat").unwrap_or_default(),
        Vec::<String>::new()
    );
    assert_eq!(wait_exit(&mut holder, T).code(), Some(79));
}
