//! Interop with kazoo's lock recipes (Debian's python3-kazoo, driven by
//! tests/zk/kazoo_lock.py) and Curator's (tests/zk/CuratorLock.java), each pair in both
//! directions: the second is refused while the first holds, waits, and gets in once the first lets
//! go. And what dlock shows of nodes other clients and `--min-hold` leave in a lock's directory.

use std::path::PathBuf;

use super::curator::{compile_curator_program, curator_at, curator_classpath};
use super::*;

/// The patterns kazoo's `Lock` and `WriteLock` need to wait for every dlock holder (README).
const KAZOO_EXCLUSIVE: &str = "-lock-,__READ__,__SEAT__";
/// The pattern kazoo's `ReadLock` needs to wait for dlock's exclusive holders.
const KAZOO_READ: &str = "-lock-";

/// The system's python3, with kazoo (a pyenv one on PATH may lack it).
pub(super) fn python() -> &'static str {
    let python = "/usr/bin/python3";
    let ok = program(python)
        .args(["-c", "import kazoo"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "kazoo is not installed: run scripts/test (Debian package python3-kazoo)"
    );
    python
}

pub(super) fn kazoo(
    server: &ZkServer,
    name: &str,
    recipe: &str,
    patterns: &str,
    how: &str,
    held: &Path,
    release: &Path,
) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zk/kazoo_lock.py");
    let mut cmd = program(python());
    cmd.arg(script)
        .arg(server.hosts())
        .args([&format!("/dlock/{name}"), recipe, how])
        .args([held, release])
        .arg(patterns)
        .stdin(Stdio::null());
    cmd
}

/// One side of a pair: dlock with these flags, a kazoo recipe with its extra_lock_patterns, or
/// a Curator recipe (`mutex`, `write`, `read`).
#[derive(Clone, Copy, Debug)]
enum Side {
    Dlock(&'static [&'static str]),
    Kazoo(&'static str, &'static str),
    Curator(&'static str),
}

pub(super) fn curator(
    server: &ZkServer,
    name: &str,
    recipe: &str,
    how: &str,
    held: &Path,
    release: &Path,
) -> Command {
    let mut cmd = curator_at(
        curator_classpath(),
        server,
        &format!("/dlock/{name}"),
        how,
        held,
        release,
    );
    cmd.arg(recipe);
    cmd
}

/// A side that holds the lock (or waits for it) in the background until told to let go.
struct Running {
    child: Child,
    held: PathBuf,
    release: PathBuf,
}

impl Side {
    /// Starts taking the lock; returns at once.
    fn start(self, server: &ZkServer, dir: &LockDir, name: &str, tag: &str) -> Running {
        let held = dir.file(&format!("{tag}.held"));
        let release = dir.file(&format!("{tag}.release"));
        let child = match self {
            Side::Dlock(flags) => {
                let script = format!("touch {}; {}", held.display(), hold_until(&release));
                let mut args = vec!["run", "-w", "60"];
                args.extend_from_slice(flags);
                args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
                server.dlock(&args).spawn().unwrap()
            }
            Side::Kazoo(recipe, patterns) => {
                kazoo(server, name, recipe, patterns, "wait", &held, &release)
                    .spawn()
                    .unwrap()
            }
            Side::Curator(recipe) => curator(server, name, recipe, "wait", &held, &release)
                .spawn()
                .unwrap(),
        };
        Running {
            child,
            held,
            release,
        }
    }

    /// One attempt that must find the lock busy.
    fn refused(self, server: &ZkServer, dir: &LockDir, name: &str) {
        let (held, release) = (dir.file("try.held"), dir.file("try.release"));
        std::fs::write(&release, "").unwrap();
        let (out, busy) = match self {
            Side::Dlock(flags) => {
                let mut args = vec!["run", "-n"];
                args.extend_from_slice(flags);
                args.extend_from_slice(&[name, "--", "true"]);
                (output(server.dlock(&args)), 75)
            }
            Side::Kazoo(recipe, patterns) => (
                output(kazoo(
                    server, name, recipe, patterns, "try", &held, &release,
                )),
                3,
            ),
            Side::Curator(recipe) => (
                output(curator(server, name, recipe, "try", &held, &release)),
                3,
            ),
        };
        assert_eq!(
            code(&out),
            busy,
            "{self:?} must be refused: {}",
            stderr(&out)
        );
        assert!(!held.exists());
        std::fs::remove_file(&release).unwrap();
    }
}

/// A side left running by a failed assertion is killed, not left holding the lock.
impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Running {
    fn wait_held(&self) {
        wait_for_file(&self.held, T);
    }

    fn finish(mut self) {
        std::fs::write(&self.release, "").unwrap();
        assert!(wait_exit(&mut self.child, T).success());
    }
}

/// `first` holds; `second` is refused, then waits (queued, not in), and gets in once `first`
/// lets go.
fn excludes(server: &ZkServer, name: &str, first: Side, second: Side) {
    let dir = LockDir::new();
    let holder = first.start(server, &dir, name, "first");
    holder.wait_held();
    let before = lock_nodes(server, name).len();
    second.refused(server, &dir, name);
    let waiter = second.start(server, &dir, name, "second");
    wait_until("the second to queue", T, || {
        lock_nodes(server, name).len() > before
    });
    assert!(!waiter.held.exists(), "{second:?} got in beside {first:?}");
    holder.finish();
    waiter.wait_held();
    waiter.finish();
}

/// Both hold at once.
fn share(server: &ZkServer, name: &str, first: Side, second: Side) {
    let dir = LockDir::new();
    let a = first.start(server, &dir, name, "first");
    a.wait_held();
    let b = second.start(server, &dir, name, "second");
    b.wait_held();
    a.finish();
    b.finish();
}

#[test]
fn kazoo_lock_and_write_lock_exclude_every_dlock_mode_both_ways() {
    let server = on_the_suites_server();
    for recipe in ["lock", "write"] {
        let kazoo = Side::Kazoo(recipe, KAZOO_EXCLUSIVE);
        for flags in [&[][..], &["--shared"], &["--limit", "2"]] {
            let dlock = Side::Dlock(flags);
            excludes(&server, "kz", kazoo, dlock);
            excludes(&server, "kz", dlock, kazoo);
        }
    }
}

#[test]
fn kazoo_read_lock_excludes_dlock_exclusive_both_ways_and_shares_with_shared() {
    let server = on_the_suites_server();
    let reader = Side::Kazoo("read", KAZOO_READ);
    excludes(&server, "kr", reader, Side::Dlock(&[]));
    excludes(&server, "kr", Side::Dlock(&[]), reader);
    // A kazoo reader is a shared holder for dlock, not an exclusive one.
    share(&server, "kr", reader, Side::Dlock(&["--shared"]));
    share(&server, "kr", Side::Dlock(&["--shared"]), reader);
}

#[test]
fn curator_write_lock_excludes_every_dlock_mode_and_its_mutex_exclusive_both_ways() {
    let server = on_the_suites_server();
    for recipe in ["write", "mutex"] {
        let curator = Side::Curator(recipe);
        let modes: &[&[&str]] = match recipe {
            "write" => &[&[], &["--shared"], &["--limit", "2"]],
            // Curator's mutex never waits for a `__READ__` node (README).
            _ => &[&[]],
        };
        for &flags in modes {
            let dlock = Side::Dlock(flags);
            excludes(&server, "cw", curator, dlock);
            excludes(&server, "cw", dlock, curator);
        }
    }
    excludes(
        &server,
        "cw",
        Side::Curator("mutex"),
        Side::Dlock(&["--shared"]),
    );
}

#[test]
fn curator_read_lock_excludes_dlock_exclusive_both_ways_and_shares_with_shared_and_limit() {
    let server = on_the_suites_server();
    let reader = Side::Curator("read");
    excludes(&server, "cr", reader, Side::Dlock(&[]));
    excludes(&server, "cr", Side::Dlock(&[]), reader);
    for flags in [&["--shared"][..], &["--limit", "2"]] {
        share(&server, "cr", reader, Side::Dlock(flags));
        share(&server, "cr", Side::Dlock(flags), reader);
    }
}

#[test]
fn a_waiter_behind_a_min_hold_kept_node_is_shown_as_a_waiter() {
    let server = on_the_suites_server();
    let out = output(server.dlock(&["run", "--min-hold", "60s", "mh", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut waiter = server
        .dlock(&["run", "-w", "60", "mh", "--", "true"])
        .spawn()
        .unwrap();
    wait_until("the waiter to queue", T, || {
        lock_nodes(&server, "mh").len() == 2
    });
    let json = status_json(&server, "mh");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "only the kept holder: {json}");
    assert!(!holders[0]["kept_until"].is_null(), "{json}");
    assert_eq!(json["waiters"].as_array().unwrap().len(), 1, "{json}");
    // release --force breaks the kept holder, not the waiter, which then gets in.
    let out = output(server.dlock(&["release", "--force", "mh"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(wait_exit(&mut waiter, T).success());
}

#[test]
fn a_kazoo_semaphore_lease_ending_in_ten_digits_is_no_exclusive_holder() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let (held, release) = (dir.file("lease.held"), dir.file("lease.release"));
    let mut lease = kazoo(&server, "sem", "lease", "", "wait", &held, &release)
        .spawn()
        .unwrap();
    wait_for_file(&held, T);
    let json = status_json(&server, "sem");
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(
        holders[0]["owner"], "(not dlock: kazoo semaphore)",
        "{json}"
    );
    let out = output(server.dlock(&["run", "-n", "sem", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut lease, T).success());
}

#[test]
fn status_lets_a_curator_waiter_past_an_expired_kept_node() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let classpath = compile_curator_program(dir.path());
    for recipe in ["mutex", "write"] {
        let out = output(server.dlock(&["run", "--min-hold", "1s", "ck", "--", "true"]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let held = dir.file(&format!("{recipe}.held"));
        let release = dir.file(&format!("{recipe}.release"));
        let mut c = curator_at(&classpath, &server, "/dlock/ck", "wait", &held, &release)
            .arg(recipe)
            .spawn()
            .unwrap();
        wait_until("Curator to queue", T, || {
            lock_nodes(&server, "ck").len() == 2
        });
        // No dlock acquirer comes by: status, once the min-hold is over, is enough.
        wait_until("Curator to get in after a status", T, || {
            let out = output(server.dlock(&["status", "ck"]));
            assert!(matches!(code(&out), 0 | 1), "{}", stderr(&out));
            wait_for_file_within(&held, Duration::from_millis(200))
        });
        let left = server.children("/dlock/ck").unwrap();
        assert_eq!(left.len(), 1, "only Curator's node: {left:?}");
        std::fs::write(&release, "").unwrap();
        assert!(wait_exit(&mut c, T).success());
    }
}

/// kazoo's `Lock` waits for the kept node as Curator does, and past its end only once a dlock
/// looks at the lock: nothing else deletes it.
#[test]
fn a_kazoo_waiter_behind_an_expired_kept_node_gets_in_when_a_dlock_looks() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let out = output(server.dlock(&["run", "--min-hold", "1s", "kk", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The min-hold counts from the grant, before the run ended: it is over 1 s after this.
    let ran = Instant::now();
    let (held, release) = (dir.file("kazoo.held"), dir.file("kazoo.release"));
    let mut waiter = kazoo(
        &server,
        "kk",
        "lock",
        KAZOO_EXCLUSIVE,
        "wait",
        &held,
        &release,
    )
    .spawn()
    .unwrap();
    wait_until("kazoo to queue", T, || lock_nodes(&server, "kk").len() == 2);
    // Well past the min-hold's end, with no dlock looking: still waiting.
    let past = (ran + Duration::from_secs(3)).saturating_duration_since(Instant::now());
    assert!(
        !wait_for_file_within(&held, past),
        "kazoo got in with no dlock looking"
    );
    let out = output(server.dlock(&["status", "kk"]));
    assert!(matches!(code(&out), 0 | 1), "{}", stderr(&out));
    wait_for_file(&held, T);
    std::fs::write(&release, "").unwrap();
    assert!(wait_exit(&mut waiter, T).success());
}

#[test]
fn a_min_hold_keeps_curators_read_write_lock_out_too_until_release_force() {
    let server = on_the_suites_server();
    let dir = LockDir::new();
    let out = output(server.dlock(&["run", "--min-hold", "60s", "mk", "--", "true"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for recipe in ["mutex", "write", "read"] {
        Side::Curator(recipe).refused(&server, &dir, "mk");
    }
    let json = status_json(&server, "mk");
    assert_eq!(json["holders"].as_array().unwrap().len(), 1, "{json}");
    let out = output(server.dlock(&["release", "--force", "mk"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(lock_nodes(&server, "mk"), Vec::<String>::new());
    let writer = Side::Curator("write").start(&server, &dir, "mk", "w");
    writer.wait_held();
    writer.finish();
}

/// Whether `path` appears within `limit`.
fn wait_for_file_within(path: &Path, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    path.exists()
}
