//! Interop with Apache Curator: a small Java program holding Curator's InterProcessMutex on the
//! same path as dlock, each excluding the other both ways.

use super::*;

/// Compiles tests/support/CuratorLock.java against the Debian Curator jars.
pub(super) fn compile_curator_program(dir: &Path) -> String {
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
    let mut cmd = Command::new("java");
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
