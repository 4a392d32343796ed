//! The file backend's default directory: one per user and host, `/run/lock/dlock-UID` (root's in
//! /run, where nobody else can make it), whatever the session's environment, and refused when
//! someone else made it first. `dlock hold`'s directory sits beside it and is checked the same way.
//!
//! Tests that create or spoil the default directory run dlock in a private mount namespace where
//! /run (or /tmp) is a directory of the test's own, so they never touch the host's; those about
//! users other than root run dlock as `VICTIM`, with `nobody` as the squatter.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn uid() -> u32 {
    own_uid()
}

fn assert_root() {
    assert_eq!(
        uid(),
        0,
        "these tests mount directories in a private namespace and hand some to another user, \
         which needs root (as in CI)"
    );
}

/// The user whose directory is squatted: a uid with no account, so no real user is touched.
const VICTIM: u32 = 4242;

/// A directory that stands in for /run/lock (root's, sticky, writable by all, like the real one).
fn fake_base() -> LockDir {
    let base = LockDir::new();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    base
}

/// A directory that stands in for /run: root's, writable by root alone, with `lock` in it as the
/// real /run/lock is.
fn fake_run() -> LockDir {
    let run = LockDir::new();
    std::fs::set_permissions(run.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(run.file("lock")).unwrap();
    std::fs::set_permissions(run.file("lock"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    run
}

/// `dlock ARGS` in a private mount namespace where `base` is mounted at `at` (after `setup`, a
/// shell line run in the namespace first), with the environment of `dlock()`, as user `uid` (root
/// when `None`). As root, the binary is opened before anything is mounted and run through its
/// descriptor, since the mounts may hide its path (a checkout under /tmp).
fn dlock_in_namespace_as(
    uid: Option<u32>,
    setup: &str,
    base: &Path,
    at: &str,
    args: &[&str],
) -> Command {
    let run = match uid {
        None => "exec /proc/self/fd/9 \"$@\"".to_owned(),
        Some(uid) => format!(
            "exec setpriv --reuid={uid} --regid={uid} --clear-groups -- {} \"$@\"",
            dlock_bin()
        ),
    };
    let mut cmd = program("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-ec"])
        .arg(format!(
            "exec 9<\"$1\"\n{setup}\nmount --bind \"$0\" {at}\nshift\n{run}"
        ))
        .arg(base)
        .arg(dlock_bin())
        .args(args)
        .stdin(Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("DLOCK_") {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn dlock_in_namespace(setup: &str, base: &Path, at: &str, args: &[&str]) -> Command {
    dlock_in_namespace_as(None, setup, base, at, args)
}

/// `dlock ARGS` as `uid` (root when `None`) seeing `run` as /run.
fn dlock_with_run(run: &Path, uid: Option<u32>, args: &[&str]) -> Command {
    dlock_in_namespace_as(uid, "", run, "/run", args)
}

fn default_in(base: &Path) -> PathBuf {
    base.join(format!("dlock-{}", uid()))
}

/// Makes `path` (in a fake /run) as `nobody`, as a squatter would.
fn squat(path: &Path) {
    let status = program("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            "mkdir",
            "-m",
            "700",
        ])
        .arg(path)
        .status()
        .expect("setpriv");
    assert!(status.success(), "nobody makes {}", path.display());
}

fn location(mut cmd: Command) -> String {
    let out = output({
        cmd.args(["status", "--json", "same-default-probe"]);
        cmd
    });
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    json["location"].as_str().unwrap().to_owned()
}

#[test]
fn the_default_directory_is_the_same_for_every_session() {
    // `status` creates nothing, so this looks at the host's real default safely.
    let elsewhere = LockDir::new();
    let bare = location({
        let mut c = dlock();
        c.env_remove("XDG_RUNTIME_DIR").env_remove("TMPDIR");
        c
    });
    let with_xdg = location({
        let mut c = dlock();
        c.env("XDG_RUNTIME_DIR", elsewhere.path())
            .env("TMPDIR", elsewhere.path());
        c
    });
    let with_tmpdir = location({
        let mut c = dlock();
        c.env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", elsewhere.path());
        c
    });
    let base = default_base();
    let expected = format!("{base}/dlock-{}/same-default-probe.lock", uid());
    assert_eq!(bare, expected);
    assert_eq!(
        with_xdg, expected,
        "XDG_RUNTIME_DIR must not move the default"
    );
    assert_eq!(with_tmpdir, expected, "TMPDIR must not move the default");

    // And `run` really locks there, with or without those variables, and -v says where: root in
    // /run, where nobody else can make the directory first, another user in /run/lock.
    assert_root();
    let run = fake_run();
    for (user, dir) in [
        (None, "dlock-0".to_owned()),
        (Some(VICTIM), format!("lock/dlock-{VICTIM}")),
    ] {
        for env in [
            vec![],
            vec![
                ("XDG_RUNTIME_DIR", elsewhere.path()),
                ("TMPDIR", elsewhere.path()),
            ],
        ] {
            let mut cmd = dlock_with_run(
                run.path(),
                user,
                &["-v", "run", "same-default", "--", "true"],
            );
            cmd.env_remove("XDG_RUNTIME_DIR").env_remove("TMPDIR");
            for (key, value) in env {
                cmd.env(key, value);
            }
            let out = output(cmd);
            assert_eq!(code(&out), 0, "{}", stderr(&out));
            assert!(
                stderr(&out).contains(&format!("using file:/run/{dir}\n")),
                "-v names the directory: {}",
                stderr(&out)
            );
        }
        let dir = run.path().join(dir);
        assert!(dir.join("same-default.lock").is_file());
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o700, "created private");
        assert_eq!(meta.uid(), user.unwrap_or(0));
    }
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "nothing in XDG_RUNTIME_DIR or TMPDIR"
    );
}

#[test]
fn without_run_lock_the_default_falls_back_to_tmp() {
    assert_root();
    let tmp = fake_base();
    // An empty /run: no /run/lock, and /var/lock (a link to it on most systems) leads nowhere.
    let out = output(dlock_in_namespace(
        "mount -t tmpfs tmpfs /run\n[ ! -d /var/lock ]",
        tmp.path(),
        "/tmp",
        &["-v", "run", "fallback", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("using file:/tmp/dlock-{}\n", uid())),
        "{}",
        stderr(&out)
    );
    assert!(default_in(tmp.path()).join("fallback.lock").is_file());
}

#[test]
fn a_squatted_or_unsafe_default_directory_is_refused_with_69() {
    assert_root();
    let victim = |dir: &Path| {
        std::os::unix::fs::chown(dir, Some(VICTIM), Some(VICTIM)).unwrap();
    };
    // What the squatter left, how to make it, and the reason dlock gives.
    type Case<'a> = (&'a str, &'a dyn Fn(&Path), String);
    let cases: [Case; 5] = [
        (
            "another user's",
            &|dir| squat(dir),
            format!(
                "it belongs to nobody (uid 65534), not to you: another user made it first; an \
                 administrator can remove it, and create it at boot before anyone else can with \
                 the tmpfiles.d line `d /run/lock/dlock-{VICTIM} 0700 {VICTIM} - -`; meanwhile \
                 --url can name a directory of your own"
            ),
        ),
        (
            "a symbolic link",
            &|dir| std::os::unix::fs::symlink("/tmp", dir).unwrap(),
            "it is a symbolic link".into(),
        ),
        (
            "a file",
            &|dir| std::fs::write(dir, "").unwrap(),
            "it is not a directory".into(),
        ),
        (
            "ours but group-writable",
            &|dir| {
                std::fs::create_dir(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o770)).unwrap();
                victim(dir);
            },
            "other users may write to it (mode 770)".into(),
        ),
        (
            "ours but writable by all",
            &|dir| {
                std::fs::create_dir(dir).unwrap();
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
                victim(dir);
            },
            "other users may write to it (mode 1777)".into(),
        ),
    ];
    for (what, make, why) in cases {
        let run = fake_run();
        let dir = run.path().join(format!("lock/dlock-{VICTIM}"));
        make(&dir);
        let before = std::fs::symlink_metadata(&dir).unwrap();
        for args in [
            &["run", "squatted", "--", "true"][..],
            &["status", "squatted"],
            &["list"],
            &["release", "--force", "squatted"],
        ] {
            let out = output(dlock_with_run(run.path(), Some(VICTIM), args));
            assert_eq!(code(&out), 69, "{what}, {args:?}: {}", stderr(&out));
            let expected =
                format!("dlock: refusing lock directory /run/lock/dlock-{VICTIM}: {why}");
            let err = stderr(&out);
            assert!(err.starts_with(&expected), "{what}, {args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{what}, {args:?}: {err}");
        }
        let after = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(
            (after.ino(), after.uid(), after.mode()),
            (before.ino(), before.uid(), before.mode()),
            "{what}: left as it was"
        );
        if after.is_dir() {
            assert_eq!(
                std::fs::read_dir(&dir).unwrap().count(),
                0,
                "{what}: nothing created in it"
            );
        }
    }
}

#[test]
fn a_squatted_directory_of_holds_is_refused_with_69_naming_its_owner_and_the_fix() {
    assert_root();
    let run = fake_run();
    let dir = run.path().join(format!("lock/dlock-holds-{VICTIM}"));
    squat(&dir);
    // `hold` holds for a shell, or an owner named: a shell of the user's own, which runs it.
    let as_victim = |args: &[&str]| {
        if args[0] != "hold" {
            return dlock_with_run(run.path(), Some(VICTIM), args);
        }
        let mut cmd = program("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-ec"])
            .arg(format!(
                "mount --bind \"$0\" /run\nexec setpriv --reuid={VICTIM} --regid={VICTIM} \
                 --clear-groups -- sh -c '\"$0\" hold --owner $$ x; exit $?' \"$1\""
            ))
            .arg(run.path())
            .arg(dlock_bin())
            .stdin(Stdio::null());
        for (key, _) in std::env::vars() {
            if key.starts_with("DLOCK_") {
                cmd.env_remove(key);
            }
        }
        cmd
    };
    for args in [&["hold", "--owner", "SHELL", "x"][..], &["release", "x"]] {
        let out = output(as_victim(args));
        assert_eq!(code(&out), 69, "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            format!(
                "dlock: refusing the directory of holds /run/lock/dlock-holds-{VICTIM}: it \
                 belongs to nobody (uid 65534), not to you: another user made it first; an \
                 administrator can remove it, and create it at boot before anyone else can with \
                 the tmpfiles.d line `d /run/lock/dlock-holds-{VICTIM} 0700 {VICTIM} - -`\n"
            ),
            "{args:?}"
        );
    }
}

#[test]
fn roots_default_directories_are_where_nobody_else_can_make_them() {
    assert_root();
    let run = fake_run();
    // What would have stopped root's cron jobs: the old places, made by another user first.
    squat(&run.path().join("lock/dlock-0"));
    squat(&run.path().join("lock/dlock-holds-0"));
    let out = output(dlock_with_run(
        run.path(),
        None,
        &["-v", "run", "rooted", "--", "true"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("using file:/run/dlock-0\n"),
        "{}",
        stderr(&out)
    );
    assert!(run.path().join("dlock-0/rooted.lock").is_file());

    // `hold` and `release`, in one shell, as a root script would use them.
    let mut cmd = program("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-ec"])
        .arg(
            "mount --bind \"$0\" /run\neval \"$(\"$1\" hold rooted)\"\n\
             [ -d /run/dlock-holds-0 ]\n\"$1\" release rooted",
        )
        .arg(run.path())
        .arg(dlock_bin())
        .stdin(Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("DLOCK_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("DLOCK_CONFIG", "");
    let out = output_within(cmd, Duration::from_secs(30));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let holds = std::fs::metadata(run.path().join("dlock-holds-0")).unwrap();
    assert_eq!(
        (holds.uid(), holds.permissions().mode() & 0o7777),
        (0, 0o700)
    );
}

#[test]
fn only_run_creates_the_default_directory() {
    assert_root();
    for user in [None, Some(VICTIM)] {
        let run = fake_run();
        for (args, expected) in [
            (&["status", "not-made"][..], 1),
            (&["list"], 0),
            (&["release", "--force", "not-made"], 1),
        ] {
            let out = output(dlock_with_run(run.path(), user, args));
            assert_eq!(code(&out), expected, "{user:?} {args:?}: {}", stderr(&out));
        }
        let left: Vec<_> = std::fs::read_dir(run.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["lock"], "{user:?}");
        assert_eq!(std::fs::read_dir(run.file("lock")).unwrap().count(), 0);
    }
}
